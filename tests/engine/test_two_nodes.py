"""Two nodes on one machine: ``NNODES=2 NODE_RANK=0|1 tools/dist_train.sh``
over 127.0.0.1, one process each, trains to the weights of one node with two
processes, bit for bit; a node whose processes die makes the other node's run
end within a bounded time, naming the cause."""
import re
import socket
import time

import pytest
import torch

from .test_exact_resume import kill_tree
from .test_reliability import ITERS, demo64, finish, start, tiny_seg_config, weights  # noqa: F401

#: slow; one xdist worker runs the modules that start torchrun jobs, one module at a time
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('torchrun')]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def node_cmd(config, work, processes: int, *extra: str) -> list:
    return ['bash', 'tools/dist_train.sh', str(config), str(processes), '--work-dir', str(work),
            '--cfg-options', 'train_dataloader.batch_size=2', *extra]


def start_nodes(config, work, tmp_path, *extra: str) -> list:
    port = str(free_port())
    return [start(node_cmd(config, work, 1, *extra), tmp_path / f'node{rank}.log', NNODES='2',
                  NODE_RANK=str(rank), MASTER_ADDR='127.0.0.1', PORT=port)
            for rank in range(2)]


def test_two_nodes_train_as_one_node_with_two_processes(demo64, tmp_path):  # noqa: F811
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.5)
    one_node = start(node_cmd(config, tmp_path / 'one_node', 2), tmp_path / 'one_node.log')
    nodes = start_nodes(config, tmp_path / 'two_nodes', tmp_path)
    logs = [finish(node, tmp_path / f'node{rank}.log') for rank, node in enumerate(nodes)]
    finish(one_node, tmp_path / 'one_node.log')
    assert 'GPU number: 2' in logs[0], logs[0][-3000:]
    ref = weights(tmp_path / 'one_node' / f'iter_{ITERS}.pth')
    got = weights(tmp_path / 'two_nodes' / f'iter_{ITERS}.pth')
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)


def test_a_lost_node_ends_the_other_nodes_run_naming_the_cause(demo64, tmp_path):  # noqa: F811
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.0)
    work = tmp_path / 'work'
    nodes = start_nodes(config, work, tmp_path, 'train_cfg.max_iters=50')
    log0 = tmp_path / 'node0.log'
    deadline = time.monotonic() + 300
    while not re.search(r'Iter\(train\) \[\s*2/50\]', log0.read_text() if log0.exists() else ''):
        assert nodes[0].poll() is None and time.monotonic() < deadline, log0.read_text()[-3000:]
        time.sleep(0.1)
    kill_tree(nodes[1].pid)   # node 1 lost: its agent and its rank, at once
    lost = time.monotonic()
    text = finish(nodes[0], log0, timeout=300, ok=False)
    ended = time.monotonic() - lost
    nodes[1].wait()
    assert nodes[0].returncode != 0 and ended < 120, f'{ended:.0f} s:\n{text[-3000:]}'
    assert 'ChildFailedError' in text and 'Root Cause' in text, text[-3000:]
    assert 'Connection reset by peer' in text or 'Connection closed by peer' in text, text[-3000:]
