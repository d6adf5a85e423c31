"""A tiny Whisper folder in the Hugging Face layout openai/whisper-* repositories use, with random weights.

The folder has what a downloaded `openai/whisper-small` has and our loader reads: `config.json`,
`generation_config.json` (language and task token maps), `model.safetensors`, `preprocessor_config.json`
(80-bin log-mel, 30 s windows) and the tokenizer files (`vocab.json`, `merges.txt`, `tokenizer.json`,
`tokenizer_config.json`, `added_tokens.json`, `special_tokens_map.json`, `normalizer.json`). The byte-level BPE
vocabulary is small (trained here on a few sentences), but the special tokens are Whisper's multilingual set in
Whisper's order: `<|endoftext|>`, `<|startoftranscript|>`, one tag per language, `<|translate|>`,
`<|transcribe|>`, `<|startoflm|>`, `<|startofprev|>`, `<|nospeech|>`, `<|notimestamps|>` and the timestamps
`<|0.00|>`…`<|30.00|>`. The text it writes is garbage; the path from audio to text is the real one.
"""

from __future__ import annotations

import json
from pathlib import Path

TRAINING_TEXT = (
    "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. "
    "It is easy to tell the depth of a well. These days a chicken leg is a rare dish. "
    "Rice is often served in round bowls. 早上好。今天天气很好。"
)
BPE_VOCAB_SIZE = 320  # the 256 byte symbols and a few merges
TASK_TOKENS = ("<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
               "<|notimestamps|>")
TIMESTAMPS = tuple(f"<|{i * 0.02:.2f}|>" for i in range(1501))


def _language_codes() -> list[str]:
    """Whisper's language tags in the order its vocabulary has them (the library's table)."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return list(LANGUAGES)


def _train_bpe() -> tuple[dict[str, int], list[str]]:
    """A byte-level BPE vocabulary (token → id) and its merges, learnt from `TRAINING_TEXT`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator([TRAINING_TEXT] * 4, trainer)
    state = json.loads(tokenizer.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    return dict(state["vocab"]), merges


def write_tiny_whisper(folder: Path, seed: int = 0, d_model: int = 32, layers: int = 1) -> Path:
    """Write a tiny random multilingual Whisper into `folder` (created) and return it."""
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperTokenizer)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Writing model shards" bar in test output

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab, merges = _train_bpe()
    vocab = dict(sorted(vocab.items(), key=lambda item: item[1]))
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot  # in vocab.json, as in openai/whisper-*
    languages = [f"<|{code}|>" for code in _language_codes()]
    added = ["<|startoftranscript|>", *languages, *TASK_TOKENS, *TIMESTAMPS]
    ids = {token: eot + 1 + i for i, token in enumerate(added)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    (folder / "added_tokens.json").write_text(json.dumps(ids, indent=2), encoding="utf-8")
    (folder / "normalizer.json").write_text(json.dumps({"colour": "color", "favourite": "favorite"}), encoding="utf-8")

    tokenizer = WhisperTokenizer(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges],
                                 normalizer_file=str(folder / "normalizer.json"))
    tokenizer.add_tokens(added, special_tokens=True)
    assert all(tokenizer.convert_tokens_to_ids(t) == i for t, i in ids.items()), "added tokens out of order"
    tokenizer.save_pretrained(str(folder))
    # As in the hub's tokenizer_config.json: the added tokens marked special, for loaders without tokenizer.json.
    config_file = folder / "tokenizer_config.json"
    tokenizer_config = json.loads(config_file.read_text(encoding="utf-8"))
    tokenizer_config["added_tokens_decoder"] = {
        str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True} for t, i in [("<|endoftext|>", eot), *ids.items()]}
    config_file.write_text(json.dumps(tokenizer_config, indent=2, ensure_ascii=False), encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
         "pad_token": "<|endoftext|>", "additional_special_tokens": added[: 1 + len(languages) + len(TASK_TOKENS)]},
        indent=2), encoding="utf-8")

    WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, hop_length=160, chunk_length=30,
                            n_fft=400).save_pretrained(str(folder))

    sot, no_timestamps = ids["<|startoftranscript|>"], ids["<|notimestamps|>"]
    space = vocab.get("Ġ", eot)
    # Trained Whisper never writes its control tokens mid-text; random weights would, so they are suppressed
    # (timestamps too: each 30 s window of a long recording is then decoded whole, the library's own fallback).
    suppress = [i for token, i in ids.items() if token != "<|startoftranscript|>"]
    config = WhisperConfig(
        vocab_size=eot + 1 + len(added), num_mel_bins=80, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model, d_model=d_model, max_source_positions=1500, max_target_positions=448,
        decoder_start_token_id=sot, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot,
        begin_suppress_tokens=[space, eot], suppress_tokens=suppress)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, max_length=448,
        begin_suppress_tokens=[space, eot], suppress_tokens=suppress, is_multilingual=True,
        lang_to_id={tag: ids[tag] for tag in languages},
        task_to_id={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
        no_timestamps_token_id=no_timestamps, prev_sot_token_id=ids["<|startofprev|>"],
        max_initial_timestamp_index=50, return_timestamps=False,
        alignment_heads=[[0, 0]])
    model.save_pretrained(str(folder))
    return folder
