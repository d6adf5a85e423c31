"""Scale-out on Ray Serve: engine replicas behind the same REST API (optional: requirements-serve.txt).

`config.py` (no Ray) turns flags or serve.yaml args into deployment options; `worker.py` is the engine
deployment (our engine unchanged, models multiplexed by id); `client.py` is the ingress's `Engine` that sends
work to it; `ingress.py` serves the app's own FastAPI routes over per-model services; `app.py` binds the graph
(for `serve deploy` too); `launch.py` starts or joins a cluster and deploys. See docs/ARCHITECTURE.md.
"""
