# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVML simulator for the tests and benchmarks: the one place that makes it importable and names its variable.

The simulator is the package gpufleet_nvml_sim in the repository's simulator/ folder, outside the collection's
plugins (a test double, never shipped to a GPU host). The tests put that folder on sys.path, as the simulated
inventories put it on PYTHONPATH; a process or a role gets both through simulated_environment().

    SIMULATOR_DIR                      the folder that holds gpufleet_nvml_sim
    simulator_on_path()                SIMULATOR_DIR first on sys.path (once); returns the package gpufleet_nvml_sim
    SIMULATOR_ENV                      the variable that names a simulated host's state file (the simulator's own
                                       name for it, which the NVML backend reads)
    simulated_environment(state_path)  {SIMULATOR_ENV: state_path, 'PYTHONPATH': SIMULATOR_DIR}
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import os
import sys

SIMULATOR_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'simulator')


def simulator_on_path():
    """Put SIMULATOR_DIR first on sys.path unless it is there already; returns the package gpufleet_nvml_sim."""
    if SIMULATOR_DIR not in sys.path:
        sys.path.insert(0, SIMULATOR_DIR)
    return importlib.import_module('gpufleet_nvml_sim')


SIMULATOR_ENV = simulator_on_path().SIMULATOR_ENV


def simulated_environment(state_path):
    """The variables a process (or the role's mig_layout_boot_environment) needs to run on the simulated host ``state_path``."""
    return {SIMULATOR_ENV: str(state_path), 'PYTHONPATH': SIMULATOR_DIR}
