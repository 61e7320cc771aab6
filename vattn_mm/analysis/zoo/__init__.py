"""The attention zoo (docs/zoo.md): every token mixer in one macro
architecture (:mod:`.variants`), its speed sweep (:mod:`.speed`), demo
accuracy runs (:mod:`.accuracy`) and report (:mod:`.report`), for
``tools/analysis/zoo.py``, which starts the processes."""
from .accuracy import (TASKS, Accuracy, data_options, pareto_front, read_accuracy_csv,
                       summarize_accuracy, task_config, train_and_test_here, train_options)
from .report import (earlier_runs, headlines, plot, report, update_page,
                     write_dataclass_csv)
from .speed import (BUILDER, Scaling, predicted_latency_s, predicted_peak, scaling, sweep,
                    tokens)
from .variants import (COMMON, CONFIGS, QUICK_ARCH, REFERENCE, backbone_config,
                       build_zoo_target, complexity, declared_variants, matching_table,
                       parse_spec, variant_backbone, variants)

__all__ = [
    'TASKS', 'Accuracy', 'data_options', 'pareto_front', 'read_accuracy_csv',
    'summarize_accuracy', 'task_config', 'train_and_test_here', 'train_options', 'earlier_runs', 'headlines',
    'plot', 'report', 'update_page', 'write_dataclass_csv', 'BUILDER', 'Scaling',
    'predicted_latency_s', 'predicted_peak', 'scaling', 'sweep', 'tokens', 'COMMON',
    'CONFIGS', 'QUICK_ARCH', 'REFERENCE', 'backbone_config', 'build_zoo_target', 'complexity',
    'declared_variants', 'matching_table', 'parse_spec', 'variant_backbone', 'variants',
]
