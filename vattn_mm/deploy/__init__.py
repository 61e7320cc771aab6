"""Deployment: ONNX export with dynamic sizes (:mod:`.onnx`), an onnxruntime
session called like the model (:mod:`.runtime`), the check of one against
the other (:mod:`.check`) and onnxruntime as the backend of a model's dense
part, exported once per weights (:mod:`.backend`);
``tools/deploy/export_onnx.py`` is the command."""
from .backend import (DEFAULT_BACKEND_CHECK_SIZES, BackboneNeck, OnnxCheckError, OnnxFeatures,
                      cached_export, default_cache_dir, dense_part, use_onnxruntime,
                      weights_key)
from .check import DEFAULT_TIE_TOL, OutputCheck, SelectionCheck, check_onnx, format_checks
from .onnx import DEFAULT_OPSET, OnnxExportError, export_onnx
from .runtime import OnnxModel

__all__ = ['DEFAULT_BACKEND_CHECK_SIZES', 'DEFAULT_OPSET', 'DEFAULT_TIE_TOL', 'BackboneNeck',
           'OnnxCheckError', 'OnnxExportError', 'OnnxFeatures', 'OnnxModel', 'OutputCheck',
           'SelectionCheck', 'cached_export', 'check_onnx', 'default_cache_dir', 'dense_part',
           'export_onnx', 'format_checks', 'use_onnxruntime', 'weights_key']
