"""The documentation names only things that exist.

For README.md, every docs/*.md page and every project's README: every repository path named in inline
code, a fenced code block or a link exists (relative links are resolved from
the page's folder; `#anchor`s must name a heading of the target page). Paths
users create (work_dirs/, checkpoints/, data/, outputs) are not repository
paths and are not checked: only paths under the repository's own top-level
folders and its root files are. Skipped: URLs, globs (`configs/*_coco.py`) and
placeholders (`configs/<name>.py`, `tools/CONFIG`); `{a,b}` groups are expanded
and every expansion must exist. README.md stays within 10 KiB, and every
table has a header separator and rows of one column count (a blank line inside
a table leaves rows without a header: a table of its own, which fails).
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ([ROOT / 'README.md'] + sorted((ROOT / 'docs').glob('*.md'))
         + sorted((ROOT / 'projects').glob('*/README.md')))
README_MAX_BYTES = 10 * 1024

#: top-level folders of the repository whose paths the docs may name
REPO_DIRS = ('configs', 'tools', 'docs', 'tests', 'vattn_mm', '.ci', 'projects', '.dev_scripts')
#: files in the repository root
ROOT_FILES = ('README.md', 'Makefile', 'setup.py', 'requirements.txt')

_SEGMENT = r'(?:[\w.\-*?<>\[\]]|\{[\w.,\-]*\})'
PATH_RE = re.compile(r'(?<![\w/.$~:-])((?:' + '|'.join(re.escape(d) for d in REPO_DIRS)
                     + r')/' + _SEGMENT + r'*(?:/' + _SEGMENT + r'*)*)')
ROOT_FILE_RE = re.compile(r'(?<![\w/.$~:-])(' + '|'.join(re.escape(f) for f in ROOT_FILES)
                          + r')(?![\w/-])')
URL_RE = re.compile(r'[a-zA-Z][\w+.-]*://\S+')
FENCE_RE = re.compile(r'^(\s*)(```|~~~)')
INLINE_CODE_RE = re.compile(r'(`+)(.+?)\1')
LINK_RE = re.compile(r'!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
PLACEHOLDER_SEGMENT = re.compile(r'^[A-Z][A-Z0-9_]+$')
SEPARATOR_RE = re.compile(r'\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*')


def expand_braces(text: str) -> list:
    """`a_{x,y}_b` -> [`a_x_b`, `a_y_b`], every group in turn."""
    m = re.search(r'\{([^{}]*)\}', text)
    if not m:
        return [text]
    out = []
    for choice in m.group(1).split(','):
        out += expand_braces(text[:m.start()] + choice + text[m.end():])
    return out


def is_placeholder_or_glob(path: str) -> bool:
    if any(c in path for c in '*?[]<>'):
        return True
    return any(PLACEHOLDER_SEGMENT.match(Path(seg).stem) for seg in path.split('/') if seg)


def split_page(text: str):
    """Yield (line number, kind, text) for code (inline and fenced) and link targets."""
    in_fence = None
    for lineno, line in enumerate(text.splitlines(), 1):
        fence = FENCE_RE.match(line)
        if fence:
            if in_fence is None:
                in_fence = fence.group(2)
                continue
            if fence.group(2) == in_fence:
                in_fence = None
                continue
        if in_fence is not None:
            yield lineno, 'code', line
            continue
        for m in INLINE_CODE_RE.finditer(line):
            yield lineno, 'code', m.group(2)
        prose = INLINE_CODE_RE.sub('', line)
        for m in LINK_RE.finditer(prose):
            yield lineno, 'link', m.group(1)


def named_paths(text: str):
    """(line number, kind, repository path) for every path the page names.

    kind is 'code' (a path relative to the repository root) or 'link' (a link
    target, relative to the page; it may carry a #anchor)."""
    for lineno, kind, chunk in split_page(text):
        if kind == 'link':
            if URL_RE.match(chunk) or chunk.startswith(('mailto:', '#')):
                continue
            yield lineno, 'link', chunk
            continue
        chunk = URL_RE.sub(' ', chunk)
        for regex in (PATH_RE, ROOT_FILE_RE):
            for m in regex.finditer(chunk):
                path = m.group(1).rstrip('.,:;')
                if is_placeholder_or_glob(path):
                    continue
                for p in expand_braces(path):
                    yield lineno, 'code', p


def github_anchor(heading: str) -> str:
    text = re.sub(r'[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}', '', heading.strip().lower())
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)
    return re.sub(r'[^\w\- ]', '', text).replace(' ', '-')


def anchors(page: Path) -> set:
    found, in_fence = set(), False
    for line in page.read_text(encoding='utf-8').splitlines():
        if FENCE_RE.match(line):
            in_fence = not in_fence
        elif not in_fence and re.match(r'#{1,6}\s', line):
            found.add(github_anchor(line.lstrip('#')))
    return found


def problems(page: Path, text: str) -> list:
    out = []
    for lineno, kind, target in named_paths(text):
        if kind == 'code':
            if not (ROOT / target).exists():
                out.append(f'{page.name}:{lineno}: {target} does not exist')
            continue
        path, _, anchor = target.partition('#')
        file = (page.parent / path).resolve()
        if not file.exists():
            out.append(f'{page.name}:{lineno}: link {target} -> {file} does not exist')
        elif anchor and file.suffix == '.md' and anchor not in anchors(file):
            out.append(f'{page.name}:{lineno}: link {target}: no heading #{anchor} in {path}')
    return out


def table_problems(page: Path, text: str) -> list:
    """Tables: header, separator, rows, all with one column count."""
    def cells(line: str) -> int:  # GitHub splits at every unescaped |, also inside `code`
        return line.replace('\\|', 'x').strip().strip('|').count('|') + 1

    out, block, in_fence = [], [], False
    lines = text.splitlines() + ['']
    for lineno, line in enumerate(lines, 1):
        if FENCE_RE.match(line):
            in_fence = not in_fence
        if not in_fence and line.lstrip().startswith('|'):
            block.append((lineno, line))
            continue
        if block:
            first = block[0][0]
            sep = block[1][1] if len(block) > 1 else ''
            if not SEPARATOR_RE.fullmatch(sep):
                out.append(f'{page.name}:{first}: table rows without a header and separator '
                           '(a blank line splitting a table?)')
            width = cells(block[0][1])
            for n, row in block:
                if cells(row) != width:
                    out.append(f'{page.name}:{n}: {cells(row)} columns, the header has {width}')
            block = []
    return out


@pytest.mark.parametrize('page', PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_exist(page):
    found = problems(page, page.read_text(encoding='utf-8'))
    assert not found, 'documentation names missing files:\n' + '\n'.join(found)


@pytest.mark.parametrize('page', PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_tables_are_well_formed(page):
    found = table_problems(page, page.read_text(encoding='utf-8'))
    assert not found, '\n'.join(found)


def test_readme_size():
    size = (ROOT / 'README.md').stat().st_size
    assert size <= README_MAX_BYTES, f'README.md is {size} bytes, at most {README_MAX_BYTES}'


def test_docs_pages_exist():
    names = {p.name for p in PAGES}
    assert {'install.md', 'backbones.md', 'training.md', 'export.md', 'benchmarks.md',
            'testing.md'} <= names


def test_extraction_catches_wrong_paths_and_skips_what_users_create():
    page = ROOT / 'docs' / 'example.md'
    text = '\n'.join([
        'Train with `tools/train.py configs/pvtv2_b2_maskrcnn_coco.py` or `configs/nope_coco.py`.',
        '```bash',
        'python tools/test.py configs/pvtv2_b2_maskrcnn_coco.py work_dirs/x/epoch_12.pth CKPT',
        "backbone=dict(init_cfg=dict(checkpoint='checkpoints/pvt_v2_b2.pth'))  # data/coco/",
        'tools/dist_train.sh configs/pvtv2_{b0,b9}_maskrcnn_coco.py 8',
        '```',
        'Globs `configs/*_maskrcnn_coco.py`, placeholders `configs/<name>.py` `tools/CONFIG`,',
        'URLs `https://github.com/x/y/blob/main/tools/gone.py`, [a page](install.md),',
        '[gone](missing.md), [anchor](../README.md#no-such-heading), `Makefile`.',
    ])
    found = problems(page, text)
    assert len(found) == 4, found
    assert 'configs/nope_coco.py' in found[0]
    assert 'configs/pvtv2_b9_maskrcnn_coco.py' in found[1]
    assert 'missing.md' in found[2] and '#no-such-heading' in found[3]
    named = {p for _, _, p in named_paths(text)}
    assert {'tools/train.py', 'tools/test.py', 'tools/dist_train.sh', 'Makefile',
            'configs/pvtv2_b0_maskrcnn_coco.py', 'install.md'} <= named
    assert not any(p.startswith(('work_dirs', 'checkpoints', 'data')) or '*' in p or '<' in p
                   for p in named)


def test_table_check_catches_a_split_table():
    page = ROOT / 'README.md'
    good = '| a | b |\n|---|---|\n| `x\\|y` | 2 |\n'
    assert table_problems(page, good) == []
    split = '| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n'
    assert len(table_problems(page, split)) == 1
    ragged = '| a | b |\n|---|---|\n| 1 | 2 | 3 |\n'
    assert len(table_problems(page, ragged)) == 1
