"""``custom_hooks = [dict(type='CompileModulesHook')]``: ``torch.compile``
only the parts of a model that compile whole (the backbone by default)."""
from __future__ import annotations

from typing import Sequence, Union

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


@HOOKS.register_module()
class CompileModulesHook(Hook):
    """Compile the submodules ``modules`` (dotted paths in the model, e.g.
    ``'backbone'``, ``'decode_head'``) with ``torch.compile(**options)``
    before the run (training, validation or testing).

    mmengine's ``compile=True`` compiles the model's whole ``train_step``
    (data preprocessing, losses, optimizer step); this compiles modules in
    place (``nn.Module.compile``): their ``forward`` is traced at the first
    call, their parameters and state-dict keys stay as they are (checkpoints
    load and save unchanged), and the rest of the model runs eagerly.
    """

    priority = 'VERY_HIGH'

    def __init__(self, modules: Union[str, Sequence[str]] = ('backbone', ), **options):
        self.modules = (modules, ) if isinstance(modules, str) else tuple(modules)
        if not self.modules or not all(isinstance(m, str) and m for m in self.modules):
            raise ValueError(f'CompileModulesHook: modules must be submodule paths such as '
                             f"'backbone', got {modules!r}")
        self.options = options
        self.compiled: list[str] = []

    def before_run(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        for path in self.modules:
            try:
                module = model.get_submodule(path)
            except AttributeError as err:
                raise AttributeError(f'CompileModulesHook: {type(model).__name__} has no '
                                     f'submodule {path!r} ({err})') from None
            if path not in self.compiled:
                module.compile(**self.options)
                self.compiled.append(path)
        runner.logger.info(f'CompileModulesHook: torch.compile({self.options}) of '
                           f'{", ".join(self.compiled)}; the first iterations compile')
