# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection as users install it: the tarball ``ansible-galaxy collection build`` makes from this checkout
(as ``make ee-context`` does), installed with ``ansible-galaxy collection install``.

It holds what users run and nothing of the development tree (galaxy.yml build_ignore); ansible-builder finds
its Python and system requirements (meta/execution-environment.yml); the NVML simulator, a test double, is not
in it, and the installed backend does not import it unless GPUFLEET_MIG_SIMULATOR asks for it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import tarfile

import pytest
import yaml

from ..support.simulator import SIMULATOR_DIR, SIMULATOR_ENV
from .conftest import REPO, load_yaml, run

pytest.importorskip('ansible_builder')

# Top-level entries of the tarball: what users run (Event-Driven Ansible's event source and rulebook under
# extensions/eda included), its documentation, licence and changelog, and the files ansible-builder reads.
SHIPPED_TOP = {'MANIFEST.json', 'FILES.json', 'LICENSE', 'README.md', 'CHANGELOG.rst', 'requirements.txt', 'bindep.txt',
               'changelogs', 'docs', 'extensions', 'inventories', 'meta', 'playbooks', 'plugins', 'roles'}
# Development only: never in the tarball (tests and their simulator, make files, benchmarks, this checkout's EE
# definition and pinned requirements, unreleased changelog fragments, build and venv folders).
NOT_SHIPPED = ('tests/', 'molecule/', 'mk/', 'Makefile', 'benchmarks/', 'build/', '.venv', 'simulator/',
               'inventories/simulated/', 'requirements/', 'execution-environment.yml', 'ansible.cfg', 'changelogs/fragments/',
               '.state/', '.gitignore', '.ansible-lint')


def tracked_files():
    listed = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'], cwd=REPO,
                            stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.splitlines()
    return set(path for path in listed if os.path.isfile(os.path.join(REPO, path)))


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    """(tarball path, its member names, the folder it is installed into)."""
    work = tmp_path_factory.mktemp('collection')
    done = run(['ansible-galaxy', 'collection', 'build', '--output-path', str(work), REPO], timeout=180)
    assert done.returncode == 0, done.stdout
    tarball = work / ('gpufleet-mig-%s.tar.gz' % load_yaml(os.path.join(REPO, 'galaxy.yml'))['version'])
    with tarfile.open(str(tarball)) as archive:
        names = set(member.name for member in archive.getmembers() if member.isfile())
    installed = work / 'installed'
    # --force: ansible-galaxy would otherwise see the checkout, linked into the configured collections path.
    done = run(['ansible-galaxy', 'collection', 'install', '--force', '--no-deps', '-p', str(installed), str(tarball)], timeout=180)
    assert done.returncode == 0, done.stdout
    return tarball, names, installed


def test_the_tarball_holds_what_users_run_and_nothing_of_the_development_tree(built):
    names = built[1]
    assert set(name.split('/')[0] for name in names) == SHIPPED_TOP
    assert [name for name in sorted(names) if name.startswith(NOT_SHIPPED)] == []
    assert [name for name in sorted(names) if '__pycache__' in name or name.endswith('.pyc')] == []
    assert set(name for name in names if name.startswith('inventories/')) <= set(
        name for name in tracked_files() if name.startswith('inventories/example/'))
    assert set(name for name in names if name.startswith('changelogs/')) == {'changelogs/changelog.yaml', 'changelogs/config.yaml'}
    # Nothing that users run is lost: every file of the shipped folders is there.
    shipped = set(name for name in tracked_files() if name.split('/')[0] in SHIPPED_TOP and not name.startswith(NOT_SHIPPED))
    assert shipped - names == set()
    for member in ('plugins/modules/nvidia_mig_layout_failure.py', 'roles/mig_layout/tasks/main.yml', 'playbooks/mig_layout.yml',
                   'meta/execution-environment.yml', 'meta/runtime.yml', 'playbooks/mig_demand.yml',
                   'extensions/eda/plugins/event_source/mig_pending_pods.py', 'extensions/eda/rulebooks/mig_demand.yml'):
        assert member in names, member


def test_the_manifest_names_the_licence_and_the_dependencies(built):
    tarball = built[0]
    with tarfile.open(str(tarball)) as archive:
        info = json.load(archive.extractfile('MANIFEST.json'))['collection_info']
        licence = archive.extractfile('LICENSE').read().decode('utf-8')
    assert info['license'] == ['GPL-3.0-or-later'] and 'GNU GENERAL PUBLIC LICENSE' in licence and 'Version 3' in licence
    # awx.awx is optional (only playbooks/awx_configure.yml uses it): not a dependency users must install.
    assert info['dependencies'] == {'kubernetes.core': '>=5.0.0'}


def test_ansible_builder_finds_the_collections_requirements(built):
    installed = built[2]
    done = run(['ansible-builder', 'introspect', '--sanitize', str(installed)], timeout=120)
    assert done.returncode == 0, done.stdout
    found = yaml.safe_load(done.stdout[done.stdout.index('---'):])
    python = set(line.split('#')[0].strip() for line in found['python'])
    assert {'nvidia-ml-py>=12.535', 'grpcio>=1.50', 'tzdata'} <= python, found
    assert 'openssh-clients [platform:rpm]' in [line.split('#')[0].strip() for line in found['system']], found


def test_the_execution_environment_pins_what_the_collection_requires():
    """requirements/ee-python.txt (this checkout's EE, pinned) covers every package of requirements.txt."""
    def names(path):
        with open(os.path.join(REPO, path)) as handle:
            lines = [line.split('#')[0].strip() for line in handle]
        return set(line.split('>')[0].split('=')[0].split('<')[0].strip().lower() for line in lines if line)
    assert names('requirements.txt') <= names('requirements/ee-python.txt')
    with open(os.path.join(REPO, 'bindep.txt')) as collection, open(os.path.join(REPO, 'requirements', 'ee-bindep.txt')) as ee:
        assert [line for line in collection if not line.startswith('#')] == [line for line in ee if not line.startswith('#')]


PROBE = '''
import json, os, sys
from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend
try:
    _nvml_backend.NvmlBackend()
    error = None
except Exception as exc:
    error = str(exc)
print(json.dumps({'imported': 'gpufleet_nvml_sim' in sys.modules, 'error': error}))
'''


@pytest.mark.parametrize('state_file', [False, True])
def test_the_installed_backend_imports_the_simulator_only_when_asked(built, tmp_path, state_file):
    """The simulator is importable here (simulator/ on the path); without GPUFLEET_MIG_SIMULATOR it is never imported."""
    installed = built[2]
    env = dict((key, value) for key, value in os.environ.items() if key != SIMULATOR_ENV)
    env['PYTHONPATH'] = os.pathsep.join([str(installed), SIMULATOR_DIR])
    if state_file:
        state = tmp_path / 'gpus.json'
        state.write_text(json.dumps({'driver_version': '580.95.05', 'gpus': [{'model': 'A30'}]}))
        env[SIMULATOR_ENV] = str(state)
    done = subprocess.run([sys.executable, '-c', PROBE], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout
    result = json.loads(done.stdout.splitlines()[-1])
    if state_file:
        assert result == {'imported': True, 'error': None}
    else:
        # No driver on this machine: the real library is missing, and the simulator was not loaded instead.
        assert result['imported'] is False and 'NVML' in result['error'], result


def test_the_changelog_has_the_release_of_the_current_version():
    """CHANGELOG.rst and changelogs/changelog.yaml (make changelog) carry galaxy.yml's version, from fragments that exist."""
    version = load_yaml(os.path.join(REPO, 'galaxy.yml'))['version']
    release = load_yaml(os.path.join(REPO, 'changelogs', 'changelog.yaml'))['releases'][version]
    fragments = set(os.listdir(os.path.join(REPO, 'changelogs', 'fragments')))
    assert release['fragments'] and set(release['fragments']) <= fragments
    with open(os.path.join(REPO, 'CHANGELOG.rst')) as handle:
        notes = handle.read()
    assert '\nv%s\n' % version in notes
    assert 'nvidia_mig_layout_failure - ' in notes  # a module new in this version, from its version_added


def test_every_changelog_fragment_is_valid():
    """What antsibull-changelog lint checks first (make changelog stops at a fragment it cannot read): a YAML
    mapping of the sections of changelogs/config.yaml to lists of strings. A ': ' inside a plain line is the
    usual slip."""
    sections = set(section for section, _title in load_yaml(os.path.join(REPO, 'changelogs', 'config.yaml'))['sections'])
    sections.update(['release_summary', 'trivial'])
    folder = os.path.join(REPO, 'changelogs', 'fragments')
    for name in sorted(os.listdir(folder)):
        try:
            fragment = load_yaml(os.path.join(folder, name))
        except yaml.YAMLError as exc:
            raise AssertionError('changelogs/fragments/%s: %s' % (name, exc))
        assert isinstance(fragment, dict) and set(fragment) <= sections, (name, sorted(fragment or {}))
        for section, entries in fragment.items():
            if section != 'release_summary':
                assert isinstance(entries, list) and all(isinstance(entry, str) for entry in entries), (name, section)
