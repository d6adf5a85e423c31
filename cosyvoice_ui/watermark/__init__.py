"""The implicit audio watermark: Resemble AI's PerTh network (MIT), run by this package's own code.

The pretrained weights come from the pinned PyPI package `resemble-perth` (requirements-offline.txt, hash-locked);
the package itself is never imported (its import chain needs torchaudio, librosa, matplotlib and more). What we
read from it are facts: the weight file, its hyperparameters and the algorithm, re-written here:

    weights.py    find the weight file in site-packages (without importing `perth`), check it against the
                  wheel's RECORD hash and the hyperparameters we implement, load its tensors
    spectral.py   the front end at 32 kHz: STFT (2048-point Hann: the checkpoint's own window, hop 320) → levels, and
                  the inverse of a spectrum by overlap-add, both frame block by frame block (bounded memory)
    network.py    the encoder (a residual on the 0-2 kHz magnitudes) and the three-speed decoder (one score)
    perth.py      `PerthMark`: embed (the mark as a difference added to the signal at its own rate) and score

tests/test_watermark_equality.py runs the package's own model code beside ours and holds them equal. Only
`serving/watermarking.py` imports this folder, lazily; nothing here is imported by the root.
"""
