# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rooms of plugins/module_utils and who may import whom (docs/architecture.md draws them).

Read from the source files (ast), so the rule holds for every import, not only the ones a test runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host._boot_install import BOOT_CODE

PACKAGE = 'ansible_collections.gpufleet.mig.plugins.module_utils'
PLUGINS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..', 'plugins'))
MODULE_UTILS = os.path.join(PLUGINS, 'module_utils')
ROOMS = ('planning', 'host', 'k8s')
# The files beside the rooms: the one error base class every room raises, and the modules' glue.
SHARED = ('_errors', '_module_support', '_diff_recorder', '_payload_import')


def python_files(folder):
    for root, dummy, names in os.walk(folder):
        for name in sorted(names):
            if name.endswith('.py'):
                yield os.path.join(root, name)


def module_util_name(path):
    """'host/_boot_entry' for plugins/module_utils/host/_boot_entry.py."""
    return os.path.relpath(path, MODULE_UTILS)[:-len('.py')].replace(os.sep, '/')


def imported(path):
    """The module_utils names (as module_util_name gives them) and the top-level packages ``path`` imports."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    utils, packages = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # "from package import module" names modules; "from module import name" names the module.
            names = [node.module] + ['%s.%s' % (node.module, alias.name) for alias in node.names]
        else:
            continue
        for name in names:
            packages.add(name.split('.')[0])
            if name.startswith(PACKAGE + '.'):
                relative = name[len(PACKAGE) + 1:].replace('.', '/')
                if os.path.isfile(os.path.join(MODULE_UTILS, relative + '.py')):
                    utils.add(relative)
    return utils, packages


MODULE_UTIL_FILES = sorted(module_util_name(path) for path in python_files(MODULE_UTILS))


def test_every_module_util_lives_in_a_room_or_is_shared_by_all():
    homeless = [name for name in MODULE_UTIL_FILES if name not in SHARED and name.split('/')[0] not in ROOMS]
    assert not homeless
    assert set(SHARED) <= set(MODULE_UTIL_FILES)
    assert set(name.split('/')[0] for name in MODULE_UTIL_FILES if '/' in name) == set(ROOMS)


def test_the_import_reader_sees_both_import_forms():
    utils, dummy = imported(os.path.join(MODULE_UTILS, 'host', '_boot_install.py'))
    assert {'_errors', 'host/_boot_entry', 'planning/_mig_planner', 'k8s/_pod_resources'} <= utils


def test_only_the_payload_list_imports_the_boot_entry_point():
    """The boot entry point is the host's command (main); what the modules share with it lives in _host_record.
    _boot_install imports it only to carry it in nvidia_mig_layout's payload (BOOT_CODE)."""
    importers = [path for path in python_files(PLUGINS) if 'host/_boot_entry' in imported(path)[0]]
    assert importers == [os.path.join(MODULE_UTILS, 'host', '_boot_install.py')]


@pytest.mark.parametrize('name', [name for name in MODULE_UTIL_FILES if name != '_module_support'])
def test_module_utils_import_no_ansible(name):
    """Only the modules' glue imports Ansible: the rest runs on the host without it (the boot unit)."""
    dummy, packages = imported(os.path.join(MODULE_UTILS, name + '.py'))
    assert 'ansible' not in packages


# room -> what its files may import: the planning core is pure (no NVML, no host files, no kubelet socket, no
# Ansible), the Kubernetes room builds on it, the host room on both; _errors needs nothing.
MAY_IMPORT = {
    'planning': ('planning', '_errors'),
    'k8s': ('k8s', 'planning', '_errors'),
    'host': ('host', 'k8s', 'planning', '_errors'),
    '_errors': (),
    '_diff_recorder': (),
    '_payload_import': (),
}


@pytest.mark.parametrize('name', [name for name in MODULE_UTIL_FILES if name != '_module_support'])
def test_each_room_imports_only_the_rooms_below_it(name):
    room = name.split('/')[0]
    utils, dummy = imported(os.path.join(MODULE_UTILS, name + '.py'))
    crossing = sorted(other for other in utils if other.split('/')[0] not in MAY_IMPORT[room])
    assert not crossing, '%s may import only %s' % (name, ', '.join(MAY_IMPORT[room]) or 'nothing of module_utils')


def first_collection_import(path):
    """The first module of the collection that ``path`` imports, as module_util_name gives it."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('ansible_collections.'):
            return '/'.join(filter(None, [node.module[len(PACKAGE) + 1:].replace('.', '/'), node.names[0].name]))
    return None


@pytest.mark.parametrize('path', sorted(python_files(os.path.join(PLUGINS, 'modules'))), ids=os.path.basename)
def test_every_module_imports_the_payload_importer_before_the_rest_of_the_collection(path):
    """Imported after it, the collection's files are compiled once each from the module's payload (_payload_import)."""
    assert first_collection_import(path) == '_payload_import'


def test_the_planning_room_needs_no_nvml_and_no_grpc():
    for name in MODULE_UTIL_FILES:
        if name.startswith('planning/'):
            dummy, packages = imported(os.path.join(MODULE_UTILS, name + '.py'))
            assert not packages & {'pynvml', 'grpc', 'ctypes', 'subprocess', 'socket'}, name


def test_the_boot_code_is_what_the_boot_entry_point_imports():
    """nvidia_mig_layout installs BOOT_CODE on the host for the boot unit: every file the entry point needs,
    directly or not, and nothing else."""
    needed, todo = set(), ['host/_boot_entry']
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(imported(os.path.join(MODULE_UTILS, name + '.py'))[0])
    assert sorted(BOOT_CODE) == sorted(needed)


def test_the_architecture_document_draws_every_file_in_its_room():
    """docs/architecture.md draws the tree as it is: every module_utils file under its room's heading."""
    with open(os.path.join(PLUGINS, '..', 'docs', 'architecture.md')) as handle:
        tree = handle.read().split('plugins/module_utils/\n', 1)[1].split('```', 1)[0]
    drawn, room = set(), None
    for line in tree.splitlines():
        words = line.replace('│', ' ').replace('├──', ' ').replace('└──', ' ').split()
        if not words:
            continue
        if words[0].rstrip('/') in ROOMS and words[0].endswith('/'):
            room = words[0].rstrip('/')
        elif words[0].endswith('.py'):
            indented = line.startswith(('│   ', '    '))
            drawn.add('%s/%s' % (room, words[0][:-3]) if indented else words[0][:-3])
    assert sorted(drawn) == MODULE_UTIL_FILES
