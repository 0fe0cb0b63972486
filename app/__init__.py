"""LlamaDesk: chat with local GGUF models, many tabs on one llama.cpp context."""

__version__ = "0.1.0"
