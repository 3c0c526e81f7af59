#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: nvidia_mig_layout_failure
short_description: Record a failed MIG layout change on the host, for its metrics and last apply record
version_added: 0.2.0
description:
  - Writes a failed apply of the layout O(name) with O(reason) to the last apply record (C(last_apply.json) in
    O(config_dir)), the record that P(gpufleet.mig.nvidia_mig_layout#module) writes after its own applies and that
    the boot unit and the metrics read.
  - With O(metrics_dir), refreshes the metrics textfile so that C(gpufleet_mig_layout_last_apply_success) is 0 at
    once, not at the timer's next tick.
  - For a step outside P(gpufleet.mig.nvidia_mig_layout#module) that failed (an eviction refused, a node that did not
    come back); the rescue of the P(gpufleet.mig.mig_layout#role) role calls it. It changes no GPU and reads no pods,
    so an unreadable kubelet does not keep the failure unrecorded.
extends_documentation_fragment:
  - gpufleet.mig.nvml
options:
  name:
    description: The layout whose change failed, a key of O(config).
    type: str
    required: true
  config:
    description:
      - The C(mig-configs) mapping of a mig-parted v1 file, or just the layout named by O(name), as given to
        P(gpufleet.mig.nvidia_mig_layout#module). The metrics say for each GPU whether it holds this layout.
    type: dict
    required: true
  reason:
    description: Why the change failed, kept in the record.
    type: str
    required: true
  config_dir:
    description: Folder of the last apply record (O(gpufleet.mig.nvidia_mig_layout#module:config_dir)).
    type: path
    default: /etc/gpufleet-mig
  metrics_dir:
    description:
      - Prometheus textfile-collector folder of C(gpufleet_mig.prom) (O(gpufleet.mig.nvidia_mig_layout#module:metrics_dir)).
        Empty writes no metrics.
    type: path
    default: ''
attributes:
  check_mode:
    support: full
    description: Writes nothing and opens no GPU.
  diff_mode:
    support: none
    description: Nothing to show; no GPU or declared layout changes.
author:
  - gpufleet.mig developers (@gpufleet)
seealso:
  - module: gpufleet.mig.nvidia_mig_layout
'''

EXAMPLES = r'''
- name: Record that the nighttime switch failed outside the layout module
  gpufleet.mig.nvidia_mig_layout_failure:
    name: nighttime
    config:
      nighttime:
        - devices: all
          mig-enabled: true
          mig-devices:
            3g: 2
    reason: eviction refused by a PodDisruptionBudget
    metrics_dir: /var/lib/node_exporter/textfile_collector
'''

RETURN = r'''
layout:
  description: The layout name.
  returned: always
  type: str
  sample: nighttime
recorded:
  description: The reason recorded (would be, in check mode).
  returned: always
  type: str
  sample: eviction refused by a PodDisruptionBudget
'''

import os

from ansible.module_utils.basic import AnsibleModule

# First of the collection's imports: from the module's payload, the others are then compiled once each (_payload_import).
from ansible_collections.gpufleet.mig.plugins.module_utils import _payload_import  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_record import metrics_content, record_apply
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import LayoutRequest
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_files import METRICS_FILE, sync
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import check_layout, validate_configs
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import COMMON_ARGUMENT_SPEC, nvml_session, run_module


def main_body(module):
    params = module.params
    request = LayoutRequest(params['name'], check_layout(validate_configs(params['config']), params['name']))
    if not module.check_mode:
        # The record is bookkeeping, as in nvidia_mig_layout: never reported as a change.
        record_apply(params['config_dir'], request.name, 'failed', 'ansible', params['reason'])
        if params['metrics_dir']:
            # Reads the GPUs only: a shared lock, as the metrics timer takes (_boot_entry).
            with nvml_session(module, exclusive=False) as backend:
                content = metrics_content(backend.read_host(), request, params['config_dir'])
            sync([(os.path.join(params['metrics_dir'], METRICS_FILE), content, 0o644)], False)
    module.exit_json(changed=False, layout=request.name, recorded=params['reason'])


def main():
    argument_spec = dict(
        name=dict(type='str', required=True),
        config=dict(type='dict', required=True),
        reason=dict(type='str', required=True),
        config_dir=dict(type='path', default='/etc/gpufleet-mig'),
        metrics_dir=dict(type='path', default=''),
    )
    argument_spec.update(COMMON_ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    run_module(module, main_body)


if __name__ == '__main__':
    main()
