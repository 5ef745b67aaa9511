# Nodeloom: one container runs the embedded default (API + executor, SQLite and artifacts in
# the /data volume). Build: docker build -t nodeloom .
# Run:   docker run -p 8000:8000 -v nodeloom-data:/data -e NODELOOM_BASE_URL=http://HOST:8000 nodeloom

ARG PYTHON_VERSION=3.11

# -- build: install the package and its dependencies (wheels only) into a virtualenv ---------
FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/nodeloom
WORKDIR /src
COPY pyproject.toml README.md LICENSE requirements.lock ./
COPY src ./src
RUN /opt/nodeloom/bin/pip install --only-binary=:all: -c requirements.lock .

# -- runtime: the virtualenv, the examples, an unprivileged user and the data volume ---------
FROM python:${PYTHON_VERSION}-slim
RUN groupadd --system --gid 10001 nodeloom \
 && useradd --system --uid 10001 --gid nodeloom --home-dir /data --shell /usr/sbin/nologin nodeloom \
 && mkdir -p /data \
 && chown nodeloom:nodeloom /data
COPY --from=build /opt/nodeloom /opt/nodeloom
COPY examples /opt/nodeloom/examples
ENV PATH=/opt/nodeloom/bin:$PATH \
    NODELOOM_DATA_DIR=/data \
    PYTHONUNBUFFERED=1
USER nodeloom
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
CMD ["nodeloom", "serve", "--host", "0.0.0.0", "--port", "8000"]
