"""Embedded demo data (written on demand, no downloads)."""
from .demo import CLASSES, PALETTE, SEG_CLASSES, SEG_PALETTE, demo_image, make_demo_dataset

__all__ = ['CLASSES', 'PALETTE', 'SEG_CLASSES', 'SEG_PALETTE', 'demo_image', 'make_demo_dataset']
