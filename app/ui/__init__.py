"""Qt user interface of LlamaDesk (widgets, dialogs and the engine worker)."""
