# One image for the API, the workers and the migration job.
#   docker build --build-arg TORCH_VARIANT=cpu -t ntklab .      # CPU-only torch
#   docker build --build-arg TORCH_VARIANT=cu126 -t ntklab .    # CUDA 12.6 torch (the default in compose)
FROM python:3.11-slim

ARG TORCH_VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ENV PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

RUN case "$TORCH_VARIANT" in cpu|cu12[0-9]) ;; *) echo "TORCH_VARIANT must be cpu or cu12x, not $TORCH_VARIANT" >&2; exit 1;; esac \
 && pip install "torch==${TORCH_VERSION}" --index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}"

WORKDIR /app
COPY . .
RUN pip install '.[server,worker]' && useradd --system --home-dir /app ntklab && mkdir -p var && chown ntklab var
USER ntklab

EXPOSE 8000
CMD ["uvicorn", "--factory", "ntklab.service.app:create_app", "--host", "0.0.0.0", "--port", "8000", "--no-proxy-headers"]
