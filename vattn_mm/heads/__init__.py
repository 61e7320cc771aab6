"""Registered decode heads that compose vattn-mm layers; usable with any
backbone (they need only its channel counts)."""
from .ea_head import EAHead

__all__ = ['EAHead']
