# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet MIG map's script in Chromium: the attention list's filters and sorting, the planned view, escaping."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.gpufleet.mig.plugins.filter.mig_fleet_map import mig_fleet_map
from ansible_collections.gpufleet.mig.tests.browser.cdp import Chromium, ensure_chromium
from ansible_collections.gpufleet.mig.tests.browser.test_fleet_map_browser import WINDOW
from ansible_collections.gpufleet.mig.tests.unit.plugins.filter.fleet_samples import host_gpus, pod, sample_fleet, simulated_gpu
from ansible_collections.gpufleet.mig.tests.unit.plugins.filter.test_mig_fleet_map import nighttime_plan

NASTY = '<img src=x onerror="document.title=1">&\'"'

ROWS = r'''
(() => [...document.querySelectorAll('#attention-table tbody tr')].filter(row => !row.hidden)
  .map(row => [row.dataset.host, row.dataset.gpu, row.dataset.states]))()
'''


def set_filter(element, value):
    return r'''
(() => {
  const input = document.getElementById('%s');
  input.value = %s;
  input.dispatchEvent(new Event('input'));
  return document.getElementById('attention-shown').textContent;
})()
''' % (element, '"%s"' % value)


CLICK = r'''
(() => { document.querySelector('button[data-sort="%s"]').click(); return true; })()
'''

PLANNED = r'''
(() => {
  window.gpufleetMigMap.drawAll();
  const gpu = document.getElementById('host-gpu-a100-01-gpu-1');
  const current = gpu.querySelector('ol.slices:not(.planned)');
  const planned = gpu.querySelector('ol.slices.planned');
  const deferred = document.getElementById('host-gpu-a100-01-gpu-2');
  return {
    goes: [...current.querySelectorAll('li[data-goes="true"]')].map(b => Number(b.dataset.start)),
    planned: [...planned.children].map(b => [b.dataset.profile, Number(b.dataset.start), b.dataset.kept]),
    moves: gpu.querySelector('p.moves').textContent,
    deferred: deferred.querySelector('p.plan-head').textContent,
    untouched: !document.getElementById('host-gpu-a100-01-gpu-0').querySelector('p.plan-head'),
  };
})()
'''

ESCAPED = r'''
(() => {
  window.gpufleetMigMap.drawAll();
  const section = [...document.querySelectorAll('section.host')].find(s => s.dataset.host.startsWith('<img'));
  const gpu = section.querySelector('article.gpu');
  const details = gpu.querySelector('details');
  details.open = true;
  return new Promise(resolve => setTimeout(() => resolve({
    host: section.dataset.host, heading: section.querySelector('h2').textContent, uuid: gpu.dataset.uuid,
    model: gpu.dataset.model, title: gpu.querySelector('li[data-state="instance"]').title,
    table: details.querySelector('table') ? details.querySelector('table').textContent : null,
    images: document.querySelectorAll('img').length, pageTitle: document.title,
  }), 50));
})()
'''


@pytest.fixture(scope='module')
def browser_page(tmp_path_factory):
    fleet = sample_fleet()
    fleet[0]['plan'] = nighttime_plan(fleet)
    gpus = host_gpus([simulated_gpu('A30', [('4g.24gb', 0, [])], uuid='GPU-' + NASTY)], in_layout={0: False},
                     allocations={(0, 0): [pod(NASTY, NASTY, NASTY)]})
    gpus[0]['name'] = 'NVIDIA ' + NASTY
    fleet.append({'host': NASTY, 'layout': NASTY, 'gpus': gpus})
    path = tmp_path_factory.mktemp('fleet-map-interaction') / 'fleet-map.html'
    path.write_text(mig_fleet_map(fleet, 'MIG fleet map', 'interaction test'), encoding='utf-8')
    binary, dummy = ensure_chromium()
    with Chromium(binary, window=WINDOW) as browser:
        session, dummy = browser.open_page(path.as_uri())
        yield browser, session


def test_the_attention_list_filters_by_state_model_and_host(browser_page):
    browser, session = browser_page
    everything = browser.evaluate(session, ROWS)
    assert len(everything) == 6
    assert browser.evaluate(session, set_filter('filter-state', 'fragmented')) == '3'
    assert sorted(r[0] for r in browser.evaluate(session, ROWS)) == ['gpu-a100-01', 'gpu-h100-01', 'gpu-h200-01']
    assert browser.evaluate(session, set_filter('filter-model', 'H200')) == '1'
    assert browser.evaluate(session, set_filter('filter-state', '')) == '1'
    assert browser.evaluate(session, set_filter('filter-model', '')) == '6'
    assert browser.evaluate(session, set_filter('filter-host', 'A100')) == '2'   # case-insensitive part of the name
    assert [r[1] for r in browser.evaluate(session, ROWS)] == ['0', '2']
    assert browser.evaluate(session, set_filter('filter-host', '')) == '6'


def test_the_attention_list_sorts_by_column(browser_page):
    browser, session = browser_page
    hosts = [r[0] for r in browser.evaluate(session, ROWS)]
    browser.evaluate(session, CLICK % 'Host')
    ascending = [r[0] for r in browser.evaluate(session, ROWS)]
    assert ascending == sorted(hosts)
    browser.evaluate(session, CLICK % 'Host')
    assert [r[0] for r in browser.evaluate(session, ROWS)] == sorted(hosts, reverse=True)
    browser.evaluate(session, CLICK % 'States')
    states = [r[2] for r in browser.evaluate(session, ROWS)]
    assert states == sorted(states)


def test_the_planned_view_marks_what_goes_and_names_the_pods_that_move(browser_page):
    browser, session = browser_page
    planned = browser.evaluate(session, PLANNED)
    assert planned['goes'] == list(range(7))
    assert planned['planned'] == [['3g.40gb', 0, 'false'], ['3g.40gb', 4, 'false']]
    assert 'Pods to evict: team-a/notebook-1' in planned['moves']
    assert 'after MIG is enabled' in planned['deferred'] and planned['untouched']


def test_values_are_escaped_where_the_script_draws_them(browser_page):
    browser, session = browser_page
    escaped = browser.evaluate(session, ESCAPED)
    assert escaped['host'] == NASTY and escaped['heading'] == NASTY and escaped['uuid'] == 'GPU-' + NASTY
    assert escaped['model'] == NASTY and '%s/%s (container %s)' % (NASTY, NASTY, NASTY) in escaped['title']
    assert NASTY in escaped['table']
    assert escaped['images'] == 0 and escaped['pageTitle'] == 'MIG fleet map'
