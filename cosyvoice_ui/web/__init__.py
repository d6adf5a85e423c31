"""The web app process: flags → Settings → one FastAPI app with the REST API and the Gradio UI → uvicorn."""
