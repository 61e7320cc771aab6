"""Running an exported file: an onnxruntime CPU session (:class:`OnnxModel`)
and where its time goes by operator type (:func:`onnx_op_times`)."""
from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from typing import Optional, Union

import numpy as np
import torch


class OnnxModel:
    """An onnxruntime CPU session on an exported file, called like the model:
    ``(1, 3, H, W)`` tensor -> list of output tensors.  ``threads``: its
    intra-op threads (default: as many as torch's, ``torch.get_num_threads()``,
    which ``OMP_NUM_THREADS`` sets); they sleep between runs instead of
    spinning, leaving the cores to the rest of the process."""

    def __init__(self, path: Union[str, os.PathLike], threads: Optional[int] = None, *,
                 profile_prefix: Optional[str] = None):
        import onnxruntime as ort
        self.path, self.threads = os.fspath(path), threads
        options = ort.SessionOptions()
        if profile_prefix:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
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


def onnx_op_times(model: OnnxModel, x: torch.Tensor, runs: int = 1) -> dict[str, list]:
    """Run ``model``'s file ``runs`` times on ``x`` in a new session with
    onnxruntime's profiler on (``enable_profiling``); per operator type of
    the optimised graph (``FusedConv``, ``MatMul``, ...): ``[kernel calls,
    kernel time in microseconds]`` summed over the runs."""
    times: dict[str, list] = defaultdict(lambda: [0, 0])
    with tempfile.TemporaryDirectory(prefix='vattn-ort-profile-') as folder:
        session = OnnxModel(model.path, model.threads,
                            profile_prefix=os.path.join(folder, 'profile'))
        for _ in range(runs):
            session(x)
        with open(session.session.end_profiling()) as f:
            events = json.load(f)
    for event in events:
        if event.get('cat') == 'Node' and event['name'].endswith('_kernel_time'):
            entry = times[event['args']['op_name']]
            entry[0] += 1
            entry[1] += event['dur']
    return dict(times)
