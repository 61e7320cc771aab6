"""The attention zoo (projects/attention_zoo/README.md): every token mixer in
one macro architecture (:mod:`.variants`, declared in :mod:`.variant_table`),
its speed sweep (:mod:`.speed`), demo accuracy runs (:mod:`.accuracy`) and
report (:mod:`.study_report`), and the probe study (:mod:`.probes`,
:mod:`.probe_study`, :mod:`.ranking`, :mod:`.probe_report`); the runs of
its training and probe processes (:mod:`.runs`) and the whole study as
``projects/attention_zoo/tools/zoo.py`` runs it (:mod:`.study`)."""
from .accuracy import (TASKS, Accuracy, data_options, pareto_front, read_accuracy_csv,
                       summarize_accuracy, task_config, train_and_test_here, train_options)
from .study_report import (earlier_runs, headlines, plot, report, update_page,
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
