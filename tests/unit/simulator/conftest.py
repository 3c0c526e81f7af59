# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``sim`` fixture: a simulated host installed into the real pynvml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api


@pytest.fixture
def sim(tmp_path):
    """``sim(gpus, faults=None, **top_level)`` -> state path, with the simulator installed and NVML initialised."""
    def start(gpus, faults=None, **extra):
        path = str(tmp_path / 'host.json')
        state = dict(extra, gpus=gpus, faults=faults or [])
        with open(path, 'w') as handle:
            json.dump(state, handle)
        sim_api.install(pynvml, path)
        pynvml.nvmlInit()
        return path
    yield start
    sim_api.uninstall(pynvml)
