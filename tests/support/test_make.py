# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The developer entry points: make help lists every target a developer runs, and the Makefile's ANSIBLE_ENV
(tests/support/ansible_env.py) gives a command the settings the tests run Ansible with."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys

from .playbook import BIN, REPO, ansible_settings

# .PHONY targets that only other targets use: the clean copy ansible-test runs in, make demo's set-up, the EDA
# virtualenv that cluster-test needs.
INTERNAL_TARGETS = {'test-copy', 'demo-bootstrap', 'eda-venv'}


def make(*args):
    """make's stdout, run in the repository without the settings of a make that runs these tests."""
    env = dict((name, value) for name, value in os.environ.items() if name not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL'))
    done = subprocess.run(['make', '--no-print-directory'] + list(args), cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    return done


def make_database():
    """(the .PHONY targets, the suites of SUITES) from make's database (-p; -q runs no recipe)."""
    printed = make('-pRrq').stdout
    phony = re.search(r'^\.PHONY: (.*)$', printed, re.MULTILINE).group(1).split()
    suites = re.search(r'^SUITES :?= (.*)$', printed, re.MULTILINE).group(1).split()
    return set(phony), suites


def help_targets():
    done = make('help')
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and all(line.startswith('make ') for line in lines), done.stdout
    return [line.split()[1] for line in lines]


def test_make_help_lists_every_suite_and_every_developer_target_once():
    phony, suites = make_database()
    listed = help_targets()
    assert sorted(set(listed)) == sorted(listed), 'listed twice: %s' % listed
    assert set(suites) <= phony, 'suites that are no .PHONY target: %s' % sorted(set(suites) - phony)
    assert INTERNAL_TARGETS <= phony, 'internal targets that are gone: %s' % sorted(INTERNAL_TARGETS - phony)
    missing = sorted((phony - INTERNAL_TARGETS) - set(listed))
    assert not missing, 'targets without a "## what it does" on their rule line (make help): %s' % missing
    assert set(listed) <= phony, 'make help lists targets that are no .PHONY target: %s' % sorted(set(listed) - phony)
    for target in ('demo', 'check', 'test', 'benchmark', 'hw-check', 'changelog', 'cluster-up', 'cluster-down',
                   'bootstrap', 'lint', 'cluster-test', 'fleet-test'):
        assert target in listed


def test_ansible_env_runs_a_command_with_the_tests_settings_and_its_own_variables():
    script = os.path.join(REPO, 'tests', 'support', 'ansible_env.py')
    show = 'import json, os; print(json.dumps(dict(os.environ)))'
    env = dict(os.environ, PATH='/usr/bin:/bin', GPUFLEET_KEPT='yes', ANSIBLE_CONFIG='/elsewhere/ansible.cfg')
    done = subprocess.run([sys.executable, script, 'GPUFLEET_EXTRA=a=b', 'ANSIBLE_ROLES_PATH=/roles', sys.executable, '-c', show],
                          env=env, stdout=subprocess.PIPE, universal_newlines=True, timeout=60, check=True)
    seen = json.loads(done.stdout)
    settings = ansible_settings()
    assert seen['ANSIBLE_COLLECTIONS_PATH'] == settings['ANSIBLE_COLLECTIONS_PATH'] == os.path.join(REPO, 'build', 'collections')
    assert seen['ANSIBLE_CONFIG'] == os.path.join(REPO, 'ansible.cfg')
    assert seen['PATH'] == BIN + os.pathsep + '/usr/bin:/bin'
    assert (seen['GPUFLEET_EXTRA'], seen['ANSIBLE_ROLES_PATH'], seen['GPUFLEET_KEPT']) == ('a=b', '/roles', 'yes')


def test_ansible_env_without_a_command_or_with_a_missing_one_fails():
    script = os.path.join(REPO, 'tests', 'support', 'ansible_env.py')
    for argv, status in (([], 2), (['NAME=VALUE'], 2), (['/nonexistent/command'], 127)):
        done = subprocess.run([sys.executable, script] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=60, check=False)
        assert done.returncode == status, (argv, done.stderr)
