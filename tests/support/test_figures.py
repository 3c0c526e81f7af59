# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmarks/figures.py: docs/figures.md is written from what make benchmark and make test printed, each figure
with its command and machine, and a partial run replaces only the sections it measured."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

import pytest

from .playbook import REPO

sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
import figures  # noqa: E402  benchmarks/figures.py

BENCHMARK_LOG = '''\
make[1]: Entering directory 'somewhere'
== figures: machine: Test CPU, 2 cores, Linux 6.1, Python 3.11.7
== figures: planner: make benchmark BENCHMARKS=planner
Planner corpus: 1000 transitions over 14 models (seed gpufleet-1), 25% of instances busy
                                       gpufleet    clear-all  brute-force
reached without touching busy             74.0%        40.0%        74.0%
== figures: fragmentation: make benchmark BENCHMARKS=fragmentation
stranded slice-hours (c)/(a): total 0.36
'''

SUITES_LOG = '''\
== make lint
lint output that is not a figure
== suite times (wall)
lint               103s  passed
sanity             106s  passed
total             1600s
'''


def test_a_benchmark_log_gives_each_section_its_command_machine_and_output_as_printed():
    found = figures.parse_log(BENCHMARK_LOG)
    assert sorted(found) == ['fragmentation', 'planner']
    assert found['planner'] == figures.Figures(
        'planner', 'make benchmark BENCHMARKS=planner', 'Test CPU, 2 cores, Linux 6.1, Python 3.11.7',
        BENCHMARK_LOG.split('BENCHMARKS=planner\n')[1].partition('== figures: fragmentation')[0])
    assert found['planner'].output.splitlines()[-1] == 'reached without touching busy             74.0%        40.0%        74.0%'
    assert found['fragmentation'].output == 'stranded slice-hours (c)/(a): total 0.36'


def test_make_test_log_gives_the_suite_times_and_nothing_of_the_suites_output():
    found = figures.parse_log(SUITES_LOG)
    assert list(found) == ['suites']
    assert found['suites'].command == 'make test'
    assert found['suites'].output.splitlines() == ['lint               103s  passed', 'sanity             106s  passed',
                                                   'total             1600s']


@pytest.mark.parametrize('log, error', [
    ('== figures: planner: make benchmark\nfigures\n', 'before any "== figures: machine:" line'),
    ('== figures: machine: m\n== figures: nonsense: x\n', "unknown figures section 'nonsense'"),
    ('== suite times (wall)\nnot a suite line\n', 'followed by no suite time'),
])
def test_a_log_it_cannot_read_is_refused_in_one_line(log, error):
    with pytest.raises(figures.FiguresError, match=error):
        figures.parse_log(log)


def test_the_page_reads_back_what_it_was_written_from():
    found = figures.parse_log(BENCHMARK_LOG + SUITES_LOG)
    page = figures.render_page(found)
    assert figures.parse_page(page) == found
    # Sections in SECTIONS' order; the ones not measured say how to measure them.
    titles = [line[3:] for line in page.splitlines() if line.startswith('## ')]
    assert titles == [title for dummy, title, dummy in figures.SECTIONS]
    assert page.count('Not measured yet: run `make figures`.') == len(figures.SECTIONS) - 3


def test_a_partial_run_replaces_only_the_sections_it_measured(tmp_path):
    page = str(tmp_path / 'figures.md')
    figures.write_page([BENCHMARK_LOG, SUITES_LOG], page, None)
    again = BENCHMARK_LOG.replace('74.0%        40.0%', '75.0%        41.0%').partition('== figures: fragmentation')[0]
    again = again.replace('Test CPU', 'Other CPU')
    written = figures.write_page([again], page, str(tmp_path / 'figures.rst'))
    with open(page) as handle:
        kept = figures.parse_page(handle.read())
    assert kept == written
    assert kept['planner'].machine.startswith('Other CPU') and '75.0%        41.0%' in kept['planner'].output
    assert kept['fragmentation'].machine.startswith('Test CPU') and kept['fragmentation'].output.endswith('0.36')
    assert kept['suites'].output.endswith('total             1600s')
    with open(str(tmp_path / 'figures.rst')) as handle:
        assert handle.read() == figures.render_docsite_page(kept)


def test_the_committed_page_is_what_the_script_writes_from_it():
    """docs/figures.md is the script's output: rewriting it from itself changes nothing (no hand edits)."""
    with open(figures.PAGE) as handle:
        text = handle.read()
    assert figures.render_page(figures.parse_page(text)) == text
    for name in ('planner', 'fragmentation'):
        assert name in figures.parse_page(text), 'docs/figures.md has no %s figures' % name
    with open(figures.DOCSITE_PAGE) as handle:
        assert handle.read() == figures.render_docsite_page(figures.parse_page(text)), 'the docsite page differs'


def test_the_docsite_page_holds_each_output_as_a_literal_block():
    found = figures.parse_log(BENCHMARK_LOG)
    page = figures.render_docsite_page(found)
    assert '.. _ansible_collections.gpufleet.mig.docsite.figures:' in page.splitlines()[0]
    assert 'Command: ``make benchmark BENCHMARKS=planner``' in page
    assert '    reached without touching busy             74.0%        40.0%        74.0%' in page.splitlines()


def test_make_benchmark_prints_the_markers_the_script_reads():
    printed = subprocess.run(['make', '--no-print-directory', '-n', 'benchmark', 'BENCHMARKS=planner demand'], cwd=REPO,
                             stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    assert 'benchmarks/figures.py machine' in printed
    for name in ('planner', 'demand'):
        assert 'echo "== figures: %s: make benchmark BENCHMARKS=%s"' % (name, name) in printed
        assert 'benchmarks/%s.py' % name in printed
    assert 'benchmarks/rollout.py' not in printed
