# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The expected layouts of tests/support/expected_layouts.yml, for Python tests.

    expected_layouts()                 the whole table: {models, without_mig, layouts}
    nvml_name(model)                   the NVML name of a simulator model key (A30 -> NVIDIA A30)
    expected_instances(layout, name)   [(profile, start), ...] in placement order; [] for a GPU without MIG
    simulated_gpus(state_file)         a simulator state file's GPUs as layout_errors takes them
    layout_errors(layout, gpus)        what differs, for GPUs given as
                                       (NVML name, MIG mode, [(profile, start, (compute instance profiles))])
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import yaml

EXPECTED_LAYOUTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'expected_layouts.yml')


def expected_layouts():
    with open(EXPECTED_LAYOUTS_FILE) as handle:
        return yaml.safe_load(handle)


def nvml_name(model):
    models = expected_layouts()['models']
    if model not in models:
        raise KeyError('%s names no model of %s (known: %s)' % (model, EXPECTED_LAYOUTS_FILE, ', '.join(sorted(models))))
    return models[model]


def expected_instances(layout, name):
    table = expected_layouts()
    if name in table['without_mig']:
        return []
    if layout not in table['layouts']:
        raise KeyError('layout %s is not in %s (known: %s)' % (layout, EXPECTED_LAYOUTS_FILE, ', '.join(sorted(table['layouts']))))
    entry = table['layouts'][layout].get(name)
    if entry is None:
        raise KeyError('%s has no expectation for %s in layout %s' % (EXPECTED_LAYOUTS_FILE, name, layout))
    return [(entry['profile'], start) for start in entry['starts']]


def simulated_gpus(state_file):
    """The GPUs of a simulator state file (gpus.json) as layout_errors takes them; a pending mode change
    shows in the mode ("enabled (disabled pending)")."""
    with open(state_file) as handle:
        state = json.load(handle)
    gpus = []
    for gpu in state['gpus']:
        mig = gpu.get('mig', {})
        mode = mig.get('current', 'disabled')
        if mig.get('pending', mode) != mode:
            mode = '%s (%s pending)' % (mode, mig['pending'])
        instances = [(gi['profile'], gi['start'], tuple(ci['profile'] for ci in gi.get('compute_instances', [])))
                     for gi in gpu.get('gpu_instances', [])]
        gpus.append((nvml_name(gpu['model']), mode, instances))
    return gpus


def layout_errors(layout, gpus):
    """One line per GPU that is not as ``layout`` wants it: MIG enabled with nothing pending, the expected GPU
    instances, each with one full-size compute instance. ``gpus``: (NVML name, MIG mode,
    [(profile, start, (compute instance profiles))])."""
    without_mig = expected_layouts()['without_mig']
    errors = []
    for index, (name, mode, instances) in enumerate(gpus):
        want_mode = 'disabled' if name in without_mig else 'enabled'
        want = [(profile, start, (profile,)) for profile, start in expected_instances(layout, name)]
        got = sorted(instances, key=lambda instance: instance[1])
        if (mode, got) != (want_mode, want):
            errors.append('GPU %d (%s): MIG %s, %s; expected MIG %s, %s' % (index, name, mode, got, want_mode, want))
    return errors
