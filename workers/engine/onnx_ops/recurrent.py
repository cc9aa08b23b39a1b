"""Recurrent layers: LSTM, GRU, RNN (ONNX gate order and layouts)."""

from __future__ import annotations
