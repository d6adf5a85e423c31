"""The voice studio: long-form work over the one-request engine.

Scripts with many voices and their takes (`script.py`, `voice_map.py`, `project.py`, `render.py`,
`mixdown.py`), audiobooks (`book.py`, `audiobook.py`, `chapters.py`), and what the Script and Audiobook tabs and
the CLI's `--script` / `--book` share (`workspace.py`, `books.py`). Every line and piece is one speech job
(`serving.jobs`), as on every other surface. No HTTP, no Gradio, no model code: it drives an `Engine` through
`serving/` and is used by the UI, the REST API and the CLI.
"""
