# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The batches Ansible itself cuts playbooks/mig_layout.yml's rollout play into: the change batches of
mig_layout_serial for a change, one batch of every host for a dry run (--check)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import ansible_collections.gpufleet.mig.plugins as collection_plugins

# The collection as Python imports it (ansible_collections/gpufleet/mig), its playbooks beside its plugins.
COLLECTION = os.path.dirname(os.path.abspath(list(collection_plugins.__path__)[0]))
COLLECTIONS_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(COLLECTION)))
HOSTS = 12

# What ansible-playbook [--check] -e EXTRA_VARS does before the rollout play runs, up to its batches
# (ansible/executor/playbook_executor.py: post_validate with the play's variables, then _get_serialized_batches), with
# every host left to change by the pre-flight's first decisions (mig_layout__to_change).
# In a process of its own: the collection loader resolves gpufleet.mig's role and filters only when it, not a plain
# sys.path entry, imports ansible_collections.
_BATCHES = r'''
import json, sys
from ansible import context
from ansible.module_utils.common.collections import ImmutableDict
context.CLIARGS = ImmutableDict(check=sys.argv[1] == 'check', diff=False, verbosity=0, forks=10, extra_vars=tuple(sys.argv[5:]))
from ansible.executor.playbook_executor import PlaybookExecutor
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook import Playbook
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.vars.manager import VariableManager
init_plugin_loader([sys.argv[2]])
loader = DataLoader()
hosts = ['gpu-%02d' % number for number in range(int(sys.argv[3]))]
inventory = InventoryManager(loader=loader, sources=[','.join(hosts) + ','])
inventory.add_group('gpu_hosts')
for host in hosts:
    inventory.add_host(host, group='gpu_hosts')
variables = VariableManager(loader=loader, inventory=inventory)
# As the pre-flight plays leave the controller: hostvars (made by the first play's run), every host to change.
from ansible.vars.hostvars import HostVars
HostVars(inventory=inventory, variable_manager=variables, loader=loader)
variables.set_host_facts('localhost', {'mig_layout__to_change': hosts, 'mig_layout__fleet_size': len(hosts)})
plays = Playbook.load(sys.argv[2] + '/ansible_collections/gpufleet/mig/playbooks/mig_layout.yml', variable_manager=variables,
                      loader=loader).get_plays()
rollout = [play for play in plays if play.name == sys.argv[4]][0]
rollout.post_validate(Templar(loader=loader, variables=variables.get_vars(play=rollout)))
executor = PlaybookExecutor(playbooks=[], inventory=inventory, variable_manager=variables, loader=loader, passwords={})
print(json.dumps([len(batch) for batch in executor._get_serialized_batches(rollout)]))
'''


ROLLOUT = 'Roll out the MIG layout'
PREFLIGHT = 'Pre-flight - check the settings and the layout catalog before any host is touched'


def rollout_batches(mode, *extra_vars, **play):
    """The batch sizes of the rollout play (or ``play=`` another play of playbooks/mig_layout.yml) over HOSTS hosts,
    as ansible-playbook [--check] -e EXTRA_VARS cuts them."""
    env = dict((name, value) for name, value in os.environ.items() if name not in ('PYTHONPATH', 'ANSIBLE_CONFIG'))
    done = subprocess.run([sys.executable, '-c', _BATCHES, mode, COLLECTIONS_ROOT, str(HOSTS), play.get('play', ROLLOUT)] + list(extra_vars),
                          cwd=COLLECTION, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_change_keeps_the_batches_of_mig_layout_serial():
    assert rollout_batches('run') == [1] * HOSTS
    assert rollout_batches('run', 'mig_layout_serial=5') == [5, 5, 2]
    assert rollout_batches('run', '{"mig_layout_serial": [1, 5, "50%"]}') == [1, 5, 6]


def test_a_dry_run_is_one_batch_of_every_host_whatever_mig_layout_serial():
    assert rollout_batches('check') == [HOSTS]
    assert rollout_batches('check', 'mig_layout_serial=25%') == [HOSTS]
    assert rollout_batches('check', '{"mig_layout_serial": [1, 5, "50%"]}') == [HOSTS]


def test_the_preflight_is_one_batch_of_every_host_whatever_mig_layout_serial():
    """Its run_once checks (the catalog, a layout matching no GPU of the fleet) see every host before any is touched."""
    assert rollout_batches('run', play=PREFLIGHT) == [HOSTS]
    assert rollout_batches('run', 'mig_layout_serial=5', play=PREFLIGHT) == [HOSTS]
    assert rollout_batches('run', '{"mig_layout_serial": [1, 5, "50%"]}', play=PREFLIGHT) == [HOSTS]
    assert rollout_batches('check', 'mig_layout_serial=25%', play=PREFLIGHT) == [HOSTS]
