"""The process-level service: the model manager and backend dispatch, the remote (thin-client) engine, saved
voices, the default voice and OpenAI aliases, the result cache. No HTTP and no Gradio here."""
