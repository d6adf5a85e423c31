"""The pocketsphinx decoder in a process of its own (run by `sphinx.SphinxRecognizer` as a script by path).

pocketsphinx decodes without releasing Python's GIL: in the server's process a few seconds of speech stalled
every other thread (`/health`, the UI, streaming audio) for as long, most of it in the final pass at the end of
the utterance, which no chunking can split. Here it stalls nobody.

It imports only the standard library and pocketsphinx, so it runs whatever the working directory. The protocol on
stdin/stdout, little-endian: the worker writes one frame once its decoder is ready; then for each request frame
of 16 kHz mono int16 PCM it answers one frame with the words heard. A frame is a status byte (0 ok, 1 error)
and, for requests and answers, a 4-byte length and that many bytes (UTF-8 text in answers). It exits when stdin
closes.
"""

from __future__ import annotations

import struct
import sys

OK, ERROR = 0, 1
HEADER = struct.Struct("<BI")


def send(out, status: int, text: str) -> None:
    data = text.encode("utf-8")
    out.write(HEADER.pack(status, len(data)) + data)
    out.flush()


def read_exactly(stream, size: int) -> bytes | None:
    """`size` bytes, or None where the stream ends first."""
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def main() -> int:
    rate = int(sys.argv[1])
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        import pocketsphinx

        decoder = pocketsphinx.Decoder(samprate=rate, loglevel="FATAL")
    except Exception as exc:  # reported to the parent, which says how to fix it
        send(stdout, ERROR, f"{type(exc).__name__}: {exc}")
        return 1
    send(stdout, OK, "ready")
    while True:
        header = read_exactly(stdin, HEADER.size)
        if header is None:
            return 0
        _, size = HEADER.unpack(header)
        pcm = read_exactly(stdin, size)
        if pcm is None:
            return 0
        try:
            decoder.start_utt()
            decoder.process_raw(pcm, full_utt=True)
            decoder.end_utt()
            hypothesis = decoder.hyp()
            send(stdout, OK, hypothesis.hypstr if hypothesis is not None else "")
        except Exception as exc:
            try:  # leave the decoder ready for the next utterance
                decoder.end_utt()
            except Exception:
                pass
            send(stdout, ERROR, f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
