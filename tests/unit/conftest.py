# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared fixtures: simulated hosts driven through the real pynvml, and in-process module runs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

import pytest

from ansible.module_utils import basic

from ansible_collections.gpufleet.mig.tests.support.simulator import SIMULATOR_ENV, simulator_on_path

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core before 2.19 (make floor-test): the module reads basic._ANSIBLE_ARGS
    import contextlib
    from unittest import mock

    @contextlib.contextmanager
    def patch_module_args(args):
        with mock.patch.object(basic, '_ANSIBLE_ARGS', json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode('utf-8')):
            yield

# The NVML simulator (simulator/, outside the collection's plugins) importable by every unit test.
simulator_on_path()

# Hypothesis keeps its caches in .hypothesis/ of the working directory (hypothesis/configuration.py reads
# HYPOTHESIS_STORAGE_DIRECTORY first; the property test modules are imported after this file): outside the
# checkout, which the collection build packs.
os.environ.setdefault('HYPOTHESIS_STORAGE_DIRECTORY', os.path.join(tempfile.gettempdir(), 'gpufleet-mig-hypothesis'))


class ModuleExit(SystemExit):
    """exit_json or fail_json was called (a SystemExit, as in a real run); ``result`` is what the module returned."""

    def __init__(self, result, failed):
        super(ModuleExit, self).__init__(result.get('msg', ''))
        self.result = result
        self.failed = failed


def _exit_json(self, **kwargs):
    kwargs.setdefault('changed', False)
    raise ModuleExit(kwargs, failed=False)


def _fail_json(self, msg, **kwargs):
    kwargs['msg'] = msg
    raise ModuleExit(kwargs, failed=True)


class SimulatedHost(object):
    """A simulated GPU host: one JSON state file plus its call log."""

    def __init__(self, path):
        self.path = str(path)

    def write(self, state):
        with open(self.path, 'w') as handle:
            json.dump(state, handle)

    def read(self):
        with open(self.path) as handle:
            return json.load(handle)

    @property
    def calls_path(self):
        return self.path + '.calls.jsonl'

    def calls(self):
        try:
            with open(self.calls_path) as handle:
                return [json.loads(line) for line in handle if line.strip()]
        except IOError:
            return []


@pytest.fixture
def simulated_host(tmp_path, monkeypatch):
    """Factory: ``simulated_host(gpus=[...], faults=[...])`` -> SimulatedHost with the env var set."""
    def make(gpus, faults=None, driver_version='580.95.05'):
        host = SimulatedHost(tmp_path / 'host.json')
        host.write({'driver_version': driver_version, 'gpus': gpus, 'faults': faults or []})
        monkeypatch.setenv(SIMULATOR_ENV, host.path)
        return host
    return make


@pytest.fixture
def run_module(monkeypatch):
    """Run a module's ``main`` in-process; returns (result, failed)."""
    monkeypatch.setattr(basic.AnsibleModule, 'exit_json', _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, 'fail_json', _fail_json)

    def run(main, args, check_mode=False, diff=False):
        arguments = dict(args)
        arguments['_ansible_check_mode'] = check_mode
        arguments['_ansible_diff'] = diff
        with patch_module_args(arguments):
            try:
                main()
            except ModuleExit as exc:
                return exc.result, exc.failed
        raise AssertionError('module returned without exit_json or fail_json')
    return run


def mutating_calls(host):
    """Every change tried on the host: NVML's mutating calls and the simulated host events (GPU reset, reboot)."""
    from gpufleet_nvml_sim import HOST_EVENTS, MUTATING_CALLS
    return [c for c in host.calls() if c.get('call') in MUTATING_CALLS + HOST_EVENTS]
