# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Import the collection's module_utils from a module's AnsiballZ payload compiling each file once.

A module runs on the host from its payload, a zip archive, and CPython's zipimport compiles every source file it
imports twice: the import system asks ``zipimporter.get_filename`` for the module's spec, which compiles the source to
learn the file's path, and ``exec_module`` compiles it again (python/cpython#141276, open in every released Python).
A module of this collection imports about 35 of its files; compiling each once is about a tenth of a decision's CPU
on each host (docs/operations.md, "Cost per host").

A module imports this file before the collection's other files: where it was itself loaded from a zip archive, it puts
a finder in front of the import system that takes the collection's module_utils from that archive, through the
zipimporter's public ``is_package`` and ``get_source``, and compiles each once. Anything else (Ansible's own
module_utils, the standard library, a payload exploded into a folder by AnsiballZ's ``explode``, the controller's
filters, the unit tests) is imported as always. No Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.machinery
import os
import sys
import zipimport

# The package whose files the finder takes: the one this file is in (ansible_collections.gpufleet.mig.plugins.module_utils).
PACKAGE = __name__.rpartition('.')[0]


class OnceCompiledLoader:
    """Loads one module from its source, compiled once; gives the source back (tracebacks, _boot_install.boot_code)."""

    def __init__(self, source, path):
        self.source = source
        self.path = path

    def create_module(self, spec):
        return None  # the import system's default module

    def get_source(self, fullname):
        return self.source

    def get_code(self, fullname):
        return compile(self.source, self.path, 'exec', dont_inherit=True)

    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)


class ZipSourceFinder:
    """Finds ``package``'s modules (and subpackages) in the zip archives on their parent package's path."""

    def __init__(self, package):
        self.prefix = package + '.'

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(self.prefix) or not path:
            return None
        name = fullname.rpartition('.')[2]
        for entry in path:
            try:
                importer = zipimport.zipimporter(entry)
                is_package = importer.is_package(fullname)
                source = importer.get_source(fullname)
            except zipimport.ZipImportError:  # a folder rather than an archive, or not in this one
                continue
            if source is None:  # compiled files only: zipimport's own way
                return None
            location = os.path.join(entry, name, '__init__.py') if is_package else os.path.join(entry, name + '.py')
            spec = importlib.machinery.ModuleSpec(fullname, OnceCompiledLoader(source, location), origin=location,
                                                  is_package=is_package)
            spec.has_location = True
            if is_package:
                spec.submodule_search_locations = [os.path.join(entry, name)]
            return spec
        return None


def install(package=PACKAGE, loader=None):
    """Put a ZipSourceFinder for ``package`` first on sys.meta_path where ``loader`` (the one that loaded this
    file) reads a zip archive; once. Returns whether the finder is in place."""
    if not isinstance(loader, zipimport.zipimporter):
        return False
    if not any(isinstance(finder, ZipSourceFinder) and finder.prefix == package + '.' for finder in sys.meta_path):
        sys.meta_path.insert(0, ZipSourceFinder(package))
    return True


install(loader=globals().get('__loader__'))
