"""One module per tab: each builds its widgets inside a `gr.Tab`, wires its own events and says how it
adapts to what the current model can do (`adapt(info, data) -> {component: update}`). The studio's tabs (Script,
Audiobook) are in `ui/studio/`."""
