"""The zoo: architectures researchers train, built from tiny configurations (no downloads), each wrapped to
map one input batch [n, ...] to logits [n, O] as `client.models.upload(module, x)` expects.

    ARCHITECTURES[name]() -> Member(module, x, library)

Token models take int64 ids [n, T]; image models float images [n, C, H, W]; sequence models
float [n, T, d]. Every module is returned in eval mode with float64 parameters, seeded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

OUT = 3
VOCAB, TOKENS = 50, 6
IMAGE = (3, 16, 16)


@dataclass
class Member:
    module: nn.Module
    x: Tensor
    library: str


class Logits(nn.Module):
    """A Hugging Face model's `.logits` (or `pooler`/mean of `last_hidden_state` through a linear head)."""

    def __init__(self, model: nn.Module, head: nn.Module | None = None) -> None:
        super().__init__()
        self.model, self.head = model, head

    def forward(self, x: Tensor) -> Tensor:
        output = self.model(x)
        if self.head is None:
            return output.logits
        return self.head(output.last_hidden_state.mean(dim=1))


def tokens(n: int = 4) -> Tensor:
    return torch.randint(1, VOCAB, (n, TOKENS), generator=torch.Generator().manual_seed(1))


def images(n: int = 4, shape=IMAGE) -> Tensor:
    return torch.randn(n, *shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _finish(module: nn.Module, x: Tensor, library: str) -> Member:
    with torch.no_grad():
        return Member(module.double().eval(), x, library)


def _hf(build: Callable[[], nn.Module], x: Tensor, head_width: int | None = None) -> Member:
    torch.manual_seed(0)
    model = build()
    head = nn.Linear(head_width, OUT) if head_width else None
    return _finish(Logits(model, head), x, "transformers")


def gpt2() -> Member:
    from transformers import GPT2Config, GPT2ForSequenceClassification

    config = GPT2Config(
        vocab_size=VOCAB, n_positions=16, n_embd=16, n_layer=2, n_head=2, num_labels=OUT, pad_token_id=0
    )
    return _hf(lambda: GPT2ForSequenceClassification(config), tokens())


def bert() -> Member:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=OUT,
    )
    return _hf(lambda: BertForSequenceClassification(config), tokens())


def llama() -> Member:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
        num_labels=OUT,
        pad_token_id=0,
    )
    return _hf(lambda: LlamaForSequenceClassification(config), tokens())


def vit() -> Member:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=OUT,
    )
    return _hf(lambda: ViTForImageClassification(config), images())


def resnet() -> Member:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=OUT
    )
    return _hf(lambda: ResNetForImageClassification(config), images())


def convnext() -> Member:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(
        num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], patch_size=2, num_labels=OUT
    )
    return _hf(lambda: ConvNextForImageClassification(config), images())


def mobilenet_v2() -> Member:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(num_channels=3, image_size=16, depth_multiplier=0.25, num_labels=OUT)
    return _hf(lambda: MobileNetV2ForImageClassification(config), images())


def distilbert() -> Member:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    config = DistilBertConfig(
        vocab_size=VOCAB, dim=16, n_layers=2, n_heads=2, hidden_dim=32, max_position_embeddings=16, num_labels=OUT
    )
    return _hf(lambda: DistilBertForSequenceClassification(config), tokens())


def roberta() -> Member:
    from transformers import RobertaConfig, RobertaForSequenceClassification

    config = RobertaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=20,
        num_labels=OUT,
        pad_token_id=0,
    )
    return _hf(lambda: RobertaForSequenceClassification(config), tokens())


def mistral() -> Member:
    from transformers import MistralConfig, MistralForSequenceClassification

    config = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
        num_labels=OUT,
        pad_token_id=0,
        sliding_window=None,
    )
    return _hf(lambda: MistralForSequenceClassification(config), tokens())


def t5_encoder() -> Member:
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2, relative_attention_num_buckets=8
    )
    config._attn_implementation = "eager"  # the TorchScript exporter's SDPA takes no float64 mask
    return _hf(lambda: T5EncoderModel(config), tokens(), head_width=16)


def deit() -> Member:
    from transformers import DeiTConfig, DeiTForImageClassification

    config = DeiTConfig(
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=OUT,
    )
    return _hf(lambda: DeiTForImageClassification(config), images())


def swin() -> Member:
    from transformers import SwinConfig, SwinForImageClassification

    config = SwinConfig(
        image_size=16,
        patch_size=2,
        num_channels=3,
        embed_dim=8,
        depths=[1, 1],
        num_heads=[1, 2],
        window_size=4,
        mlp_ratio=2.0,
        num_labels=OUT,
    )
    config._attn_implementation = "eager"  # the TorchScript exporter's SDPA takes no float64 mask
    return _hf(lambda: SwinForImageClassification(config), images())


def efficientnet() -> Member:
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    config = EfficientNetConfig(
        num_channels=3, image_size=32, width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=128, num_labels=OUT
    )
    return _hf(lambda: EfficientNetForImageClassification(config), images(shape=(3, 32, 32)))


class TokenTransformer(nn.Module):
    """nn.TransformerEncoder over an nn.Embedding with learned positions, mean-pooled into a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.positions = nn.Embedding(VOCAB, 16), nn.Parameter(0.1 * torch.randn(TOKENS, 16))
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder, self.head = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(16, OUT)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.encoder(self.embed(x) + self.positions).mean(dim=1))


class Recurrent(nn.Module):
    """An nn.LSTM / nn.GRU over [n, T, d] sequences (batch first), its last step through a linear head."""

    def __init__(self, cell: type[nn.Module], bidirectional: bool = False) -> None:
        super().__init__()
        self.rnn = cell(4, 8, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(8 * (2 if bidirectional else 1), OUT)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.rnn(x)[0][:, -1])


def sequences(n: int = 4) -> Tensor:
    return torch.randn(n, 5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _nn(build: Callable[[], nn.Module], x: Tensor) -> Member:
    torch.manual_seed(0)
    return _finish(build(), x, "torch.nn")


def transformer_encoder() -> Member:
    return _nn(TokenTransformer, tokens())


def lstm() -> Member:
    return _nn(lambda: Recurrent(nn.LSTM, bidirectional=True), sequences())


def gru() -> Member:
    return _nn(lambda: Recurrent(nn.GRU), sequences())


def conv1d_groupnorm() -> Member:
    """Conv1d + GroupNorm + SiLU over [n, C, L] signals, pooled."""
    return _nn(
        lambda: nn.Sequential(
            nn.Conv1d(2, 8, 3, padding=1),
            nn.GroupNorm(4, 8),
            nn.SiLU(),
            nn.Conv1d(8, 8, 3, stride=2),
            nn.GroupNorm(2, 8),
            nn.SiLU(),
            nn.AdaptiveAvgPool1d(1),
            nn.Flatten(),
            nn.Linear(8, OUT),
        ),
        torch.randn(4, 2, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64),
    )


def _trained_batch_norms(module: nn.Module) -> nn.Module:
    """Running statistics away from (0, 1), as after training, so that folding them would change the function."""
    generator = torch.Generator().manual_seed(2)
    for norm in module.modules():
        if isinstance(norm, nn.modules.batchnorm._BatchNorm):
            norm.running_mean.copy_(0.3 * torch.randn(norm.running_mean.shape, generator=generator))
            norm.running_var.copy_(0.5 + torch.rand(norm.running_var.shape, generator=generator))
    return module


def vgg_batchnorm() -> Member:
    """A VGG-style CNN: (Conv 3×3, BatchNorm, ReLU) ×2, max-pool, twice, then a linear head."""

    def block(c_in: int, c_out: int) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]

    return _nn(
        lambda: _trained_batch_norms(
            nn.Sequential(
                *block(3, 4),
                *block(4, 4),
                nn.MaxPool2d(2),
                *block(4, 8),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(8 * 4 * 4, OUT),
            )
        ),
        images(),
    )


def depthwise_cnn() -> Member:
    """MobileNet-style depthwise-separable blocks: depthwise 3×3 (groups = C), BatchNorm, ReLU6, pointwise 1×1."""

    def separable(c_in: int, c_out: int, stride: int) -> list[nn.Module]:
        return [
            nn.Conv2d(c_in, c_in, 3, stride=stride, padding=1, groups=c_in, bias=False),
            nn.BatchNorm2d(c_in),
            nn.ReLU6(),
            nn.Conv2d(c_in, c_out, 1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU6(),
        ]

    return _nn(
        lambda: _trained_batch_norms(
            nn.Sequential(
                nn.Conv2d(3, 8, 3, stride=2, padding=1),
                *separable(8, 16, 1),
                *separable(16, 16, 2),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16, OUT),
            )
        ),
        images(),
    )


ARCHITECTURES: dict[str, Callable[[], Member]] = {
    "gpt2": gpt2,
    "bert": bert,
    "distilbert": distilbert,
    "roberta": roberta,
    "llama": llama,
    "mistral": mistral,
    "t5_encoder": t5_encoder,
    "vit": vit,
    "deit": deit,
    "swin": swin,
    "convnext": convnext,
    "resnet": resnet,
    "mobilenet_v2": mobilenet_v2,
    "efficientnet": efficientnet,
    "transformer_encoder": transformer_encoder,
    "lstm": lstm,
    "gru": gru,
    "conv1d_groupnorm": conv1d_groupnorm,
    "vgg_batchnorm": vgg_batchnorm,
    "depthwise_cnn": depthwise_cnn,
}
