# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each model's GPU as the backend reads it through the simulator (the production path)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import tempfile

import yaml

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document

# One simulated model per distinct MIG profile table (the PCIe and A800/H800 twins of a board share its
# names and placements, so the planner and the modules would learn nothing new from them).
MIG_MODELS = ['A100-SXM4-40GB', 'A100-SXM4-80GB', 'A30', 'H100-SXM5-80GB', 'H100-NVL', 'H20', 'H200', 'GH200-96GB', 'GH200-144GB',
              'B200', 'GB200', 'B300', 'GB300', 'RTX-PRO-6000-SERVER']
_CACHE = {}
# The catalog the mig_layout role ships (roles/mig_layout/files/catalog.yml).
SHIPPED_CATALOG = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'mig_layout', 'files', 'catalog.yml')


def shipped_catalog():
    """The shipped catalog, validated as the role loads it."""
    with open(SHIPPED_CATALOG) as handle:
        return validate_document(yaml.safe_load(handle))


def read_simulated_host(gpus):
    """Backend read of a throw-away simulated host (_host_model.Host)."""
    directory = tempfile.mkdtemp(prefix='gpufleet-catalog-')
    previous = os.environ.get(_nvml_backend.SIMULATOR_ENV)
    try:
        path = os.path.join(directory, 'host.json')
        with open(path, 'w') as handle:
            json.dump({'driver_version': '580.95.05', 'gpus': gpus}, handle)
        os.environ[_nvml_backend.SIMULATOR_ENV] = path
        backend = _nvml_backend.NvmlBackend()
        try:
            return backend.read_host()
        finally:
            backend.close()
    finally:
        if previous is None:
            os.environ.pop(_nvml_backend.SIMULATOR_ENV, None)
        else:
            os.environ[_nvml_backend.SIMULATOR_ENV] = previous
        shutil.rmtree(directory)


def model_gpu(model):
    """An empty, MIG-enabled GPU of ``model`` as the backend reads it (_host_model.Gpu, immutable: shared)."""
    if model not in _CACHE:
        host = read_simulated_host([{'model': model, 'mig': {'current': 'enabled', 'pending': 'enabled'}}])
        _CACHE[model] = host.gpus[0]
    return _CACHE[model]
