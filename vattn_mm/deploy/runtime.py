"""Running an exported file: an onnxruntime CPU session (:class:`OnnxModel`)."""
from __future__ import annotations

import os
from typing import Optional, Union

import numpy as np
import torch


class OnnxModel:
    """An onnxruntime CPU session on an exported file, called like the model:
    ``(1, 3, H, W)`` tensor -> list of output tensors.  ``threads``: its
    intra-op threads (default: as many as torch's, ``torch.get_num_threads()``,
    which ``OMP_NUM_THREADS`` sets); they sleep between runs instead of
    spinning, leaving the cores to the rest of the process."""

    def __init__(self, path: Union[str, os.PathLike], threads: Optional[int] = None):
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.add_session_config_entry('session.intra_op.allow_spinning', '0')
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(os.fspath(path), options,
                                            providers=['CPUExecutionProvider'])
        self.input_name = self.session.get_inputs()[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        array = x.detach().to('cpu', torch.float32).contiguous().numpy()
        return [torch.from_numpy(np.asarray(out))
                for out in self.session.run(None, {self.input_name: array})]
