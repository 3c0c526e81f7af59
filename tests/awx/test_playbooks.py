# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""awx_configure.yml and every playbook its job templates run exist and pass ansible-playbook --syntax-check."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from .conftest import REPO, load_yaml, run

AWX_CONFIGURE = os.path.join('playbooks', 'awx_configure.yml')


def awx_tasks(module):
    """The tasks of awx_configure.yml that call ``module`` (FQCN)."""
    plays = load_yaml(os.path.join(REPO, AWX_CONFIGURE))
    return [task for play in plays for task in play.get('tasks', []) if module in task]


def template_playbooks():
    return sorted(set(task['awx.awx.job_template']['playbook'] for task in awx_tasks('awx.awx.job_template')))


def test_job_templates_name_the_expected_playbooks():
    assert template_playbooks() == ['playbooks/awx_configure.yml', 'playbooks/mig_demand.yml', 'playbooks/mig_layout.yml',
                                    'playbooks/mig_repack.yml', 'playbooks/mig_report.yml']


def test_every_awx_module_is_called_by_fqcn_and_the_organization_is_only_looked_up():
    plays = load_yaml(os.path.join(REPO, AWX_CONFIGURE))
    modules = [key for play in plays for task in play['tasks'] for key in task
               if key not in ('name', 'vars', 'loop', 'loop_control', 'when', 'register', 'check_mode')]
    assert modules and all(module.startswith(('awx.awx.', 'ansible.builtin.')) for module in modules), modules
    organization = awx_tasks('awx.awx.organization')
    assert [task['awx.awx.organization']['state'] for task in organization] == ['exists']
    assert all(task.get('check_mode') is True for task in organization)
    # No credential is created or given a secret here: they are referenced by name only.
    assert not awx_tasks('awx.awx.credential')


def test_playbooks_exist_and_pass_syntax_check():
    playbooks = [AWX_CONFIGURE] + [path for path in template_playbooks() if path != AWX_CONFIGURE]
    for path in playbooks:
        assert os.path.isfile(os.path.join(REPO, path)), path
    result = run(['ansible-playbook', '--syntax-check', '-i', os.path.join('inventories', 'simulated')] + playbooks)
    assert result.returncode == 0, result.stdout
    for path in playbooks:
        assert 'playbook: %s' % path in result.stdout, result.stdout
