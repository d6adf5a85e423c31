"""The studio's tabs in Gradio: the Script tab (`script_tab.py`, with its voice rows `voices.py` and its lines
`lines.py`) and the Audiobook tab (`book_tab.py`), glued to `studio/` (`workspace.py`, `books.py`, which hold
no Gradio and are shared with the CLI) by `events.py`."""
