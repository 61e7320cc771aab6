"""The model index (``model-index.yml``, ``configs/metafiles/``) checked
against the checkout's configs and ``docs/backbones.md``, and the weights table
of that page written from it.

    python .dev_scripts/model_index.py --check   # list every problem, exit 1 if any
    python .dev_scripts/model_index.py --write   # rewrite docs/backbones.md's table from the index

Checked: record names are unique and in a collection; every config a record names
exists and every config in configs/ and configs/mmpretrain/ has one record; weights
are http(s) addresses, a direct download names its file, an ImageNet record has a
file name; every backbone fragment's ``pretrained`` is a record's address (direct
downloads) or ``checkpoints/<file>`` (files downloaded by hand), of the fragment's
own backbone; every dense record names the backbone its config builds; metrics
are numbers in (0, 100]; the docs table is the one the index gives.

The configs are read as source (no mmengine): the checks need only their
literal assignments.
"""
from __future__ import annotations

import argparse
import ast
import sys
import urllib.parse
from pathlib import Path
from typing import Optional

from vattn_mm.checkpoint import released
from vattn_mm.utils.atomic_io import atomic_write

#: the checkout whose files are checked
ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / 'docs' / 'backbones.md'
FRAGMENT_DIR = ROOT / 'configs' / '_base_' / 'backbones'
BEGIN = '<!-- weights table: .dev_scripts/model_index.py --write writes it from configs/metafiles/ -->'
END = '<!-- end of the weights table -->'


# --- configs read as source: fragments and their bases ----------------------------

def _assignments(path: Path) -> dict:
    """Top-level ``name = <literal or dict(...)>`` of a config file."""
    found = {}
    for node in ast.parse(path.read_text(encoding='utf-8')).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    return found


def _literal(node) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _dict_keywords(node) -> dict:
    """The literal keywords of a ``dict(...)`` call."""
    if isinstance(node, ast.Call) and getattr(node.func, 'id', None) == 'dict':
        return {k.arg: _literal(k.value) for k in node.keywords if k.arg}
    return {}


def local_bases(path: Path) -> list:
    """The files in configs/ that ``path`` inherits, directly or not."""
    names = _literal(_assignments(path).get('_base_', ast.Constant(None)))
    bases = []
    for name in [names] if isinstance(names, str) else names or []:
        if '::' not in name:
            base = (path.parent / name).resolve()
            bases += [base] + local_bases(base)
    return bases


def fragments() -> list:
    """The backbone fragments, one per variant (``<family>_common.py`` excluded)."""
    return sorted(p for p in FRAGMENT_DIR.glob('*.py') if not p.stem.endswith('_common'))


def fragment_info(path: Path) -> tuple:
    """``('Type:arch', pretrained)`` of a fragment (type and arch may come from
    its ``_common`` base); the arch is None for an arch dict or a missing one."""
    backbone = {}
    for source in reversed([path] + local_bases(path)):
        backbone.update(_dict_keywords(_assignments(source).get('backbone')))
    arch = backbone.get('arch')
    spec = f"{backbone.get('type')}:{arch}" if isinstance(arch, str) else None
    return spec, _literal(_assignments(path).get('pretrained', ast.Constant(None)))


def task_configs() -> list:
    """Every config a record must describe: configs/*.py and configs/mmpretrain/*.py."""
    return sorted(list((ROOT / 'configs').glob('*.py'))
                  + list((ROOT / 'configs' / 'mmpretrain').glob('*.py')))


# --- checks ---------------------------------------------------------------------

def _url_problem(url: str) -> Optional[str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ('http', 'https') or not parts.netloc:
        return f'{url!r} is not an http(s) address'
    return None


def _url_file(url: str) -> Optional[str]:
    """The file name a URL's path ends with (one with an extension), if any."""
    name = urllib.parse.urlsplit(url).path.rstrip('/').rsplit('/', 1)[-1]
    return name if '.' in name else None


def record_problems(records: list, collections: list) -> list:
    out = []
    families = {c['Name'] for c in collections}
    fragment_specs = {fragment_info(p)[0] for p in fragments()}
    seen = set()
    for r in records:
        where = f'{r.name}:'
        if r.name in seen:
            out.append(f'{where} the name is used twice')
        seen.add(r.name)
        if r.family not in families:
            out.append(f'{where} collection {r.family!r} is not one of {sorted(families)}')
        if r.backbone.partition(':')[0] != r.family or not r.backbone.partition(':')[2]:
            out.append(f'{where} Backbone {r.backbone!r} is not "{r.family}:<arch>"')
        if r.config and not (ROOT / r.config).is_file():
            out.append(f'{where} config {r.config} does not exist')
        if r.weights or r.download or r.pretraining:
            if r.download not in released.DOWNLOAD_KINDS:
                out.append(f'{where} Download {r.download!r} is not one of '
                           f'{released.DOWNLOAD_KINDS}')
            elif (r.download == 'unpublished') == bool(r.weights):
                out.append(f'{where} Weights {r.weights!r} with Download {r.download!r}')
        if r.weights:
            problem = _url_problem(r.weights)
            if problem:
                out.append(f'{where} {problem}')
            url_file = _url_file(r.weights)
            if r.download == 'direct' and url_file and r.file and url_file != r.file:
                out.append(f'{where} File {r.file!r} but the address downloads {url_file!r}')
            if r.download == 'direct' and not (url_file or r.file):
                out.append(f'{where} the direct address {r.weights} names no file: give File')
        if r.pretraining and not r.file and r.backbone in fragment_specs:
            out.append(f'{where} an ImageNet record a fragment may load needs a File')
        for metric, value in r.metrics.items():
            if not isinstance(value, (int, float)) or not 0 < value <= 100:
                out.append(f'{where} {metric} = {value!r} is not a number in (0, 100]')
        if not r.pretraining and not r.config:
            out.append(f'{where} a dense record without a Config')
    return out


def loaded_record(pretrained: str, imagenet: list):
    """The ImageNet record a fragment's ``pretrained`` names: its address (a
    direct download naming its file) or ``checkpoints/<file>``."""
    for r in imagenet:
        if r.url_names_file and pretrained == r.weights:
            return r
        if r.file and pretrained == f'checkpoints/{r.file}':
            return r
    return None


def fragment_problems(records: list) -> list:
    out = []
    imagenet = [r for r in records if r.pretraining]
    for path in fragments():
        spec, pretrained = fragment_info(path)
        where = f'{path.relative_to(ROOT)}:'
        if pretrained is None:
            continue  # trained from scratch (zoo, mixed pyramids)
        record = loaded_record(pretrained, imagenet)
        if record is None:
            out.append(f'{where} pretrained {pretrained!r} is no released record\'s address '
                       'or checkpoints/<File>')
            continue
        if record.url_names_file and pretrained != record.weights:
            out.append(f'{where} {record.name} is a direct download: point pretrained at '
                       f'{record.weights}')
        if spec != record.backbone:
            out.append(f'{where} builds {spec} but loads {record.name} ({record.backbone})')
    return out


def config_problems(records: list) -> list:
    out = []
    by_config: dict = {}
    for r in records:
        if r.config:
            by_config.setdefault(r.config, []).append(r)
    fragment_set = set(fragments())
    for path in task_configs():
        rel = str(path.relative_to(ROOT))
        found = by_config.get(rel, [])
        if len(found) != 1:
            out.append(f'{rel}: {len(found)} records in the model index (one expected)')
            continue
        record = found[0]
        if record.pretraining:
            continue
        used = [b for b in local_bases(path) if b in fragment_set]
        spec = fragment_info(used[0])[0] if len(used) == 1 else None
        if spec != record.backbone:
            out.append(f'{rel}: builds {spec} (its fragment), the record {record.name} says '
                       f'{record.backbone}')
    return out


# --- the docs table --------------------------------------------------------------

def _number(value) -> str:
    return '-' if value is None else str(value)


def _weights_cell(r) -> str:
    if not r.weights:
        return f'`{r.file}` (not published)' if r.file else '-'
    label = r.file or _url_file(r.weights) or 'page'
    if r.url_names_file:
        return f'[{label}]({r.weights})'
    return f'[{label}]({r.weights}) (by hand)'


def _loaded_by(r, by_record: dict) -> str:
    cells = [f'`{p.relative_to(ROOT)}`' for p in by_record.get(r.name, [])]
    if r.config:
        cells.append(f'recipe `{r.config}`')
    return ', '.join(cells) or '-'


def _recipe_cell(r) -> str:
    if r.official_config:
        return f'[{r.recipe or "config"}]({r.official_config})'
    return r.recipe or '-'


def _versus_cell(r) -> str:
    if not r.official_config:
        return 'no official config'
    cells = [f'differs in `{key}`: {why}' for key, why in r.deviations.items()] or [
        'the official recipe']
    return '; '.join(cells + ([f'({r.official_note})'] if r.official_note else []))


def render(records: list) -> str:
    """The markdown between the markers."""
    imagenet = [r for r in records if r.pretraining]
    by_record: dict = {}
    for path in fragments():
        pretrained = fragment_info(path)[1]
        record = loaded_record(pretrained, imagenet) if pretrained else None
        if record:
            by_record.setdefault(record.name, []).append(path)
    lines = ['ImageNet checkpoints (top-1 at the given resolution, as published):', '',
             '| backbone | data | res | top-1 | file | source | loaded by | note |',
             '|---|---|---|---|---|---|---|---|']
    for r in imagenet:
        data = r.dataset.replace('ImageNet-', 'IN-')
        lines.append(f'| `{r.backbone}` | {data} | {r.resolution} | '
                     f'{_number(r.metrics.get("Top 1 Accuracy"))} | {_weights_cell(r)} | '
                     f'[source]({r.source}) | {_loaded_by(r, by_record)} | {r.note or ""} |')
    lines += ['', 'Dense configs with published results of the official model of their recipe',
              '(COCO val box / mask AP, ADE20K val mIoU) and the official dense checkpoints:', '',
              '"vs official" compares the config with the official config of the run: each record in',
              '`configs/metafiles/` names it (`Official Config`, at a pinned commit) and its recipe',
              '(`Official Values`: optimizer, schedule, batch, scales, precision, ...), and',
              '`tests/project/test_recipes.py` holds the config to them but for the stated `Deviations`.',
              'A dense config not listed here has no official counterpart and claims no published number.',
              '',
              '| config | official recipe | vs official | box AP | mask AP | mIoU | official weights | source |',
              '|---|---|---|---|---|---|---|---|']
    for r in records:
        if r.pretraining or not (r.metrics or r.weights or r.official_config):
            continue
        lines.append(f'| `{r.config}` | {_recipe_cell(r)} | {_versus_cell(r)} | '
                     f'{_number(r.metrics.get("box AP"))} | '
                     f'{_number(r.metrics.get("mask AP"))} | {_number(r.metrics.get("mIoU"))} | '
                     f'{_weights_cell(r)} | {f"[source]({r.source})" if r.source else "-"} |')
    return '\n'.join(lines)


def _docs_parts(text: str) -> tuple:
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f'{DOCS.relative_to(ROOT)}: needs one {BEGIN!r} line and one {END!r} '
                         'line after it')
    head, rest = text.split(BEGIN)
    table, tail = rest.split(END)
    return head, table, tail


def docs_problems(records: list) -> list:
    try:
        _, table, _ = _docs_parts(DOCS.read_text(encoding='utf-8'))
    except ValueError as err:
        return [str(err)]
    if table.strip() != render(records):
        return [f'{DOCS.relative_to(ROOT)}: the weights table differs from the model index; '
                'run .dev_scripts/model_index.py --write']
    return []


def all_problems(index: Optional[Path] = None) -> list:
    """Every problem of the model index (default: the checkout's), one line each."""
    index = index or ROOT / 'model-index.yml'
    collections, _ = released.load_model_index(index)
    records = released.released_weights(index=index)
    return (record_problems(records, collections) + fragment_problems(records)
            + config_problems(records) + docs_problems(records))


def write_docs(index: Optional[Path] = None) -> None:
    """Rewrite the weights table of docs/backbones.md from the model index."""
    records = released.released_weights(index=index or ROOT / 'model-index.yml')
    head, _, tail = _docs_parts(DOCS.read_text(encoding='utf-8'))
    atomic_write(DOCS, f'{head}{BEGIN}\n{render(records)}\n{END}{tail}'.encode('utf-8'))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument('--check', action='store_true', help='list every problem; exit 1 if any')
    mode.add_argument('--write', action='store_true', help='rewrite the docs table, then check')
    args = parser.parse_args()
    if args.write:
        write_docs()
    problems = all_problems()
    for problem in problems:
        print(problem)
    if not problems:
        records = released.released_weights(index=ROOT / 'model-index.yml')
        print(f'model index OK: {len(records)} records')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
