"""perfbisect: git-bisect-driven performance regression detection for LLM serving engines."""

__version__ = "0.1.0"
