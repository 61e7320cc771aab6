"""Deployment: ONNX export with dynamic sizes (:mod:`.onnx`), an onnxruntime
session called like the model (:mod:`.runtime`) and the check of one against
the other (:mod:`.check`); ``tools/deploy/export_onnx.py`` is the command."""
from .check import DEFAULT_TIE_TOL, OutputCheck, SelectionCheck, check_onnx, format_checks
from .onnx import DEFAULT_OPSET, OnnxExportError, export_onnx
from .runtime import OnnxModel

__all__ = ['DEFAULT_OPSET', 'DEFAULT_TIE_TOL', 'OnnxExportError', 'OnnxModel', 'OutputCheck',
           'SelectionCheck', 'check_onnx', 'export_onnx', 'format_checks']
