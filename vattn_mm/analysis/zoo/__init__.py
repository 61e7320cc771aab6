"""The attention zoo (docs/zoo.md): every token mixer in one macro
architecture (:mod:`.variants`), its speed sweep (:mod:`.speed`), demo
accuracy runs (:mod:`.accuracy`) and report (:mod:`.report`), and the probe
study (:mod:`.probes`, :mod:`.probe_study`, :mod:`.ranking`,
:mod:`.probe_report`); the processes they run in (:mod:`.processes`) and the
whole study as ``tools/analysis/zoo.py`` runs it (:mod:`.study`)."""
from .accuracy import (TASKS, Accuracy, data_options, pareto_front, read_accuracy_csv,
                       summarize_accuracy, task_config, train_and_test_here, train_options)
from .report import (earlier_runs, headlines, plot, report, update_page,
                     write_dataclass_csv)
from .probe_report import plot_probes, probe_report
from .probe_study import SCALES, ProbeRun, designs, read_probe_csv, run_probe
from .probes import PROBES, Probe, get_probe
from .ranking import estimate, supported_claims, supported_ranks
from .speed import (BUILDER, Scaling, predicted_latency_s, predicted_peak, scaling, sweep,
                    tokens)
from .variants import (COMMON, CONFIGS, QUICK_ARCH, REFERENCE, backbone_config,
                       build_zoo_target, complexity, declared_variants, matching_table,
                       parse_spec, variant_backbone, variants)

__all__ = [
    'plot_probes', 'probe_report', 'SCALES', 'ProbeRun', 'designs', 'read_probe_csv',
    'run_probe', 'PROBES', 'Probe', 'get_probe', 'estimate', 'supported_claims',
    'supported_ranks', 'TASKS', 'Accuracy', 'data_options', 'pareto_front', 'read_accuracy_csv',
    'summarize_accuracy', 'task_config', 'train_and_test_here', 'train_options', 'earlier_runs', 'headlines',
    'plot', 'report', 'update_page', 'write_dataclass_csv', 'BUILDER', 'Scaling',
    'predicted_latency_s', 'predicted_peak', 'scaling', 'sweep', 'tokens', 'COMMON',
    'CONFIGS', 'QUICK_ARCH', 'REFERENCE', 'backbone_config', 'build_zoo_target', 'complexity',
    'declared_variants', 'matching_table', 'parse_spec', 'variant_backbone', 'variants',
]
