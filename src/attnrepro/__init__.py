"""attnrepro: reproducible experiments for two 2026 theory papers about attention."""

__version__ = "0.1.0"
