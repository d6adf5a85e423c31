"""What a streamed DiT flow keeps between its passes, so that each pass computes only the frames it adds.

A streamed v3 utterance re-runs the flow over every frame so far at each chunk (`streaming_qwen`). With
chunk-causal attention, a causal position convolution, per-frame Euler updates and a fixed noise per frame
index, the frames of a chunk that a pass completed come out of every later chunk-causal pass unchanged, at
every Euler step and in every layer. So a pass can start at the first frame past the kept chunks if it has,
for each Euler step:

* each block's keys and values of the kept frames (after the rotary rotation: positions are absolute);
* the last `kernel - 1` frames of the input projection and of the first position convolution (the two causal
  convolutions look that far back).

`DiTStreamState` holds these for one stream, one `DiTStepState` per Euler step. A pass writes its frames as
pending; `commit(frames)` keeps those that lie in complete chunks (a chunk's frames see each other, so a
chunk cut short by a pass's end would change later). The kept arrays are replaced, never written into, so a
state may be copied (`copy`) and shared read-only: the per-voice prompt store does that.

Memory: keys + values of one frame are 2 · dim numbers per block, per guidance row, per Euler step (v3 fast:
22 blocks × 2 rows × 2 steps × 2048 · 2 bytes in bf16 ≈ 0.36 MB per frame). `max_frames` caps what a state
keeps; past it a pass recomputes from the last kept chunk (the result is the same, only slower).

The numbers: in float32 a cached pass equals the full pass up to float summation order; where the estimator's
linears are int8 dynamic (fast), each call quantises its own activations, so a pass over fewer frames takes
other scales (benchmarks/deviation.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DiTStepState:
    """One Euler step's kept frames: per block keys and values [B, H, K, dh], and the two convolution
    contexts [B, kernel-1, D] (zeros before frame 0, as the causal left padding; set by the first pass).
    The pending convolution inputs are [old context, the pass's frames] along T."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    proj_context: torch.Tensor | None = None
    conv_context: torch.Tensor | None = None
    # What the running pass adds, kept apart until `DiTStreamState.commit` decides what stays.
    pending_keys: list[torch.Tensor] = field(default_factory=list)
    pending_values: list[torch.Tensor] = field(default_factory=list)
    pending_proj: torch.Tensor | None = None
    pending_conv: torch.Tensor | None = None

    def clear_pending(self) -> None:
        self.pending_keys, self.pending_values = [], []
        self.pending_proj = self.pending_conv = None

    def nbytes(self) -> int:
        tensors = [*self.keys, *self.values, self.proj_context, self.conv_context]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)


class DiTStreamState:
    """The kept frames of one stream (or of a voice's prompt), for `steps` Euler steps and `rows` guidance
    rows. `frames` is how many leading frames every step holds (a multiple of `chunk`)."""

    def __init__(self, steps: int, rows: int, chunk: int, max_frames: int | None = None,
                 kv_dtype: torch.dtype | None = None) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1 frame, got {chunk}")
        self.steps, self.rows, self.chunk = steps, rows, chunk
        self.max_frames = max_frames
        self.kv_dtype = kv_dtype  # None: as computed
        self.frames = 0
        self.step_states = [DiTStepState() for _ in range(steps)]

    def step(self, index: int) -> DiTStepState:
        return self.step_states[index]

    def matches(self, steps: int, rows: int) -> bool:
        return self.steps == steps and self.rows == rows

    def commit(self, total_frames: int) -> int:
        """The running pass covered frames [self.frames, total_frames): keep those of complete chunks (up to
        `max_frames`) and drop the rest. Returns the frames now kept."""
        keep = (total_frames // self.chunk) * self.chunk
        if self.max_frames is not None:
            keep = min(keep, (self.max_frames // self.chunk) * self.chunk)
        add = keep - self.frames
        for state in self.step_states:
            if add > 0 and state.pending_keys:
                state.keys = [_append(old, new[:, :, :add], self.kv_dtype)
                              for old, new in _pairs(state.keys, state.pending_keys)]
                state.values = [_append(old, new[:, :, :add], self.kv_dtype)
                                for old, new in _pairs(state.values, state.pending_values)]
                state.proj_context = _tail(state.proj_context, state.pending_proj, add)
                state.conv_context = _tail(state.conv_context, state.pending_conv, add)
            state.clear_pending()
        if add > 0 and all(s.keys for s in self.step_states):
            self.frames = keep
        return self.frames

    def discard_pending(self) -> None:
        for state in self.step_states:
            state.clear_pending()

    def copy(self) -> DiTStreamState:
        """A new state holding the same kept frames: it shares the kept tensors, which neither state will write
        (they are only ever replaced), and has its own pending fields."""
        out = DiTStreamState(self.steps, self.rows, self.chunk, self.max_frames, self.kv_dtype)
        for mine, theirs in zip(out.step_states, self.step_states):
            mine.keys, mine.values = list(theirs.keys), list(theirs.values)
            mine.proj_context, mine.conv_context = theirs.proj_context, theirs.conv_context
        out.frames = self.frames
        return out

    def adopt(self, other: DiTStreamState) -> None:
        """Take `other`'s kept frames (made for the same steps, rows and chunk) as this state's start."""
        if not (other.steps, other.rows, other.chunk) == (self.steps, self.rows, self.chunk):
            raise ValueError("a kept state of other steps, rows or chunk size cannot be adopted")
        self.step_states, self.frames = other.step_states, other.frames

    def nbytes(self) -> int:
        return sum(s.nbytes() for s in self.step_states)


def _pairs(old: list[torch.Tensor], new: list[torch.Tensor]):
    if old and len(old) != len(new):
        raise ValueError(f"a pass wrote {len(new)} layers into a state of {len(old)}")
    return zip(old or [None] * len(new), new)


def _append(old: torch.Tensor | None, new: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    new = new if dtype is None else new.to(dtype)
    return new.clone() if old is None else torch.cat([old, new], dim=2)


def _tail(old: torch.Tensor | None, pending: torch.Tensor | None, add: int) -> torch.Tensor | None:
    """The convolution context after keeping `add` more frames. `pending` is the pass's input to the
    convolution: its old context (kernel-1 frames) followed by the pass's frames, so the kernel-1 frames
    before kept frame `add` are pending[:, add : add + kernel-1]."""
    if pending is None or old is None:
        return old
    width = old.size(1)
    return pending[:, add:add + width].clone()
