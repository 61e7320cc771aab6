"""What a user measures on their own model: parameters and multiply-adds
(:mod:`.complexity`; the papers' figures they are checked against:
:mod:`.published_complexity`), ``torch.compile`` graph breaks
(:mod:`.graph_breaks`), speed and memory (:mod:`.bench`, the benchmark
library, whose worker processes the tools in ``tools/analysis/`` start) and
effective receptive fields (:mod:`.erf`); the models come from a spec, a
config or a registered backbone (:mod:`.model_spec`)."""
from .graph_breaks import CompileReport, GraphBreak, compile_report, target_graph_breaks
from .complexity import (COUNT_STANDINS, Complexity, count_complexity, count_params,
                         declared_macs)
from .model_spec import (MIXER_SPEC, ImageNetClassifier, Target, build_spec, mixer_stage,
                      build_config_model, build_target, model_complexity,
                      spec_complexity)

__all__ = [
    'CompileReport', 'GraphBreak', 'compile_report', 'target_graph_breaks',
    'COUNT_STANDINS', 'Complexity', 'count_complexity', 'count_params', 'declared_macs',
    'MIXER_SPEC', 'mixer_stage', 'ImageNetClassifier', 'Target', 'build_spec', 'build_config_model',
    'build_target', 'model_complexity', 'spec_complexity',
]
