"""The transcription backend: speech → text for prompt transcripts.

`whisper.py` runs a downloaded multilingual Whisper (Hugging Face folder, through `transformers`), `sphinx.py`
the offline English fallback (pocketsphinx and its bundled model), `catalogue.py` lists and downloads the
Whisper folders, `signal.py` brings any recording to the 16 kHz both expect. Only `serving/transcription.py`
imports this package, lazily; nothing here is imported by the root.
"""
