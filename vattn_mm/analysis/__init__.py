"""Model analysis: parameters and multiply-adds (:mod:`.complexity`),
``torch.compile`` graph breaks (:mod:`.compile`), the
models measured (:mod:`.targets`) and the published numbers they are checked
against (:mod:`.reference`).  Speed and memory: :mod:`.bench` (the
benchmark library) and :mod:`.zoo` (the attention zoo), whose worker
processes the tools in ``tools/analysis/`` start.  Effective receptive
fields: :mod:`.erf`."""
from .compile import CompileReport, GraphBreak, compile_report, target_graph_breaks
from .complexity import (COUNT_STANDINS, Complexity, count_complexity, count_params,
                         declared_macs)
from .targets import (MIXER_SPEC, ImageNetClassifier, Target, build_spec, mixer_stage,
                      build_config_model, build_target, model_complexity,
                      spec_complexity)

__all__ = [
    'CompileReport', 'GraphBreak', 'compile_report', 'target_graph_breaks',
    'COUNT_STANDINS', 'Complexity', 'count_complexity', 'count_params', 'declared_macs',
    'MIXER_SPEC', 'mixer_stage', 'ImageNetClassifier', 'Target', 'build_spec', 'build_config_model',
    'build_target', 'model_complexity', 'spec_complexity',
]
