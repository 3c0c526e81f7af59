# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mig_fleet_map filter: page structure, escaping, totals, slice states against the geometry, bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy
import hashlib
import inspect
import json
import random
import re

from dataclasses import replace
from html.parser import HTMLParser

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter import mig_fleet_map as mig_fleet_map_module
from ansible_collections.gpufleet.mig.plugins.filter.mig_fleet_map import FilterModule, mig_fleet_map
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import (
    Catalog,
    GeometryError,
    Occupancy,
    analyze,
    slice_states,
)
from ansible_collections.gpufleet.mig.plugins.modules.nvidia_mig_facts import gpu_facts
from ansible_collections.gpufleet.mig.tests.unit.plugins.filter.fleet_samples import (
    host_gpus,
    pod,
    sample_fleet,
    simulated_gpu,
)
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.oracle import (
    all_placements,
    free_space_figures,
    with_instances,
)

VOID = frozenset(('meta', 'link', 'br', 'img', 'input', 'hr', 'wbr', 'source', 'col', 'area', 'base', 'embed', 'track'))
MODELS = ['A100-SXM4-40GB', 'A100-SXM4-80GB', 'A30', 'H100-SXM5-80GB', 'H200', 'B200']


class Node(object):
    def __init__(self, tag, attrs, parent):
        self.tag = tag
        self.attrs = dict(attrs)
        self.parent = parent
        self.children = []
        self.texts = []

    def text(self):
        return ''.join(self.texts + [child.text() for child in self.children])

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()

    def find_all(self, tag=None, **attrs):
        """Descendants by tag and attributes (``data_state='free'`` matches data-state; True means present)."""
        wanted = dict((key.replace('_', '-'), value) for key, value in attrs.items())
        found = []
        for node in self.walk():
            if tag and node.tag != tag:
                continue
            if all((key in node.attrs) if value is True else node.attrs.get(key) == value for key, value in wanted.items()):
                found.append(node)
        return found

    def classes(self):
        return (self.attrs.get('class') or '').split()


class TreeBuilder(HTMLParser):
    """A strict little DOM: every element must be closed by its own end tag."""

    def __init__(self):
        HTMLParser.__init__(self, convert_charrefs=True)
        self.root = Node('#document', [], None)
        self.current = self.root
        self.doctype = None

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag):
        assert tag not in VOID, 'end tag for void element %s' % tag
        assert self.current.tag == tag, 'end tag </%s> closes <%s>' % (tag, self.current.tag)
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.texts.append(data)


def parse(page):
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    assert builder.current is builder.root, 'unclosed <%s>' % builder.current.tag
    return builder


def one_host(gpus, host='node-1', layout='daytime'):
    return [{'host': host, 'layout': layout, 'gpus': gpus}]


def payload_of(page):
    """The JSON the page's script draws the hosts from."""
    found = re.findall(r'<script type="application/json" id="fleet-data">(.*?)</script>', page, re.S)
    assert len(found) == 1
    return json.loads(found[0])


MODE = {'e': 'enabled', 'd': 'disabled', 'u': 'unsupported'}


def pod_text(pod):
    return pod if isinstance(pod, str) else '%s (container %s)' % tuple(pod)


def drawn(page):
    """{(host, GPU index): what the script draws of that GPU}, decoded from the positions SCRIPT documents."""
    data = payload_of(page)
    names, models = data['p'], data['m']
    result = {}
    for host, layout, dom_id, failed, planned, gpus in data['h']:
        for g in gpus:
            figures = None
            if g[8] is not None:
                figures = {'free_slices': g[8][0], 'stranded_slices': g[8][1],
                           'largest_placeable': names[g[8][2]] if g[8][2] >= 0 else None, 'fragmentation': g[8][3],
                           'repacked_largest_placeable': names[g[8][4]] if g[8][4] >= 0 else None}
            plan = None
            if g[12] is not None:
                plan = {'after': None if g[12][0] is None else [(names[i[0]], i[1], i[2], bool(i[3])) for i in g[12][0]],
                        'destroyed': g[12][1], 'pods_to_evict': g[12][2], 'in_layout': bool(g[12][3]),
                        'mig_after': MODE.get(g[12][4]), 'note': g[12][5]}
            result[(host, g[0])] = {
                'host_layout': layout, 'dom_id': '%s-gpu-%d' % (dom_id, g[0]), 'host_id': dom_id, 'failed': failed,
                'planned_layout': planned, 'uuid': g[1], 'model': models[g[2]], 'mig': MODE[g[3]], 'pending': MODE[g[4]],
                'in_layout': {1: True, 0: False, None: None}[g[5]], 'total_slices': g[6],
                'states': [{'f': 'free', 's': 'stranded', 'u': 'unusable'}[c] if c in 'fsu' else ord(c) - 48 for c in g[7]],
                'figures': figures,
                'instances': [{'profile': names[i[0]], 'start': i[1], 'size': i[2], 'id': i[3], 'busy': bool(i[4]),
                               'pids': i[5], 'pods': [pod_text(p) for p in i[6]], 'compute_instances': [names[c] for c in i[7]]}
                              for i in g[9]],
                'processes': g[10], 'pods': [pod_text(p) for p in g[11]], 'plan': plan,
            }
    return result


# ---- structure --------------------------------------------------------------------


def test_filter_is_registered():
    filters = FilterModule().filters()
    assert filters['mig_fleet_map'] is mig_fleet_map
    assert sorted(filters) == ['mig_fleet_map', 'mig_report_cached_records', 'mig_report_lines', 'mig_report_merge',
                               'mig_report_part', 'mig_report_records', 'mig_report_totals']


def test_page_is_self_contained_html():
    page = mig_fleet_map(sample_fleet(), 'Fleet', 'generated by the unit test')
    parsed = parse(page)
    document = parsed.root
    assert parsed.doctype == 'DOCTYPE html'
    assert document.find_all('html')[0].attrs['lang'] == 'en'
    assert document.find_all('title')[0].text() == 'Fleet'
    assert 'generated by the unit test' in document.find_all('header')[0].text()
    csp = document.find_all('meta', http_equiv='Content-Security-Policy')[0].attrs['content']
    scripts = document.find_all('script')
    assert [s.attrs.get('type') for s in scripts] == ['application/json', None]
    # the one inline script runs because the policy names its hash; nothing else can (no 'unsafe-inline' for scripts)
    digest = base64.b64encode(hashlib.sha256(scripts[1].text().encode('utf-8')).digest()).decode('ascii')
    assert "default-src 'none'" in csp and "script-src 'sha256-%s'" % digest in csp and csp.count('unsafe-inline') == 1
    assert not document.find_all('link') and not document.find_all('img')
    for node in document.walk():
        assert not set(node.attrs) & {'src', 'srcset', 'action'}, node.tag
        assert node.attrs.get('href', '#').startswith('#'), node.attrs
    style = document.find_all('style')[0].text()
    assert 'url(' not in style and '@import' not in style and '@font-face' not in style
    for section in ('attention', 'fleet-totals', 'legend', 'hosts'):
        assert document.find_all('section', id=section)
    ids = [node.attrs['id'] for node in document.walk() if 'id' in node.attrs]
    assert len(ids) == len(set(ids))
    # the attention list comes first
    assert [n.attrs['id'] for n in document.find_all('section') if 'id' in n.attrs][0] == 'attention'


@pytest.mark.parametrize('instances, stranded, fragmentation', [
    ([('1g.10gb', 0, []), ('1g.10gb', 3, []), ('1g.10gb', 6, [])], 1, 0.5),   # churned
    ([('1g.10gb', start, []) for start in range(7)], 0, 0.0),                  # the daytime layout
])
def test_the_map_draws_the_figures_the_facts_report(instances, stranded, fragmentation):
    # Same inputs as test_mig_geometry's facts/metrics/repack test: one definition, read by all four.
    gpu = replace(with_instances(model_gpu('A100-SXM4-80GB'), instances), index=0, processes=())
    assert not gpu.busy
    facts = gpu_facts(gpu)
    assert (facts['stranded_slices'], facts['fragmentation']) == (stranded, fragmentation)
    page = mig_fleet_map([{'host': 'h', 'layout': None, 'gpus': [facts]}])
    assert payload_of(page)['h'][0][5][0][8][1:4:2] == [stranded, fragmentation]   # stranded slices, fragmentation


def test_the_html_comes_from_an_autoescaping_template():
    source = inspect.getsource(mig_fleet_map_module)
    assert 'autoescape=True' in source and 'from_string(PAGE)' in source
    text = mig_fleet_map_module.PAGE
    assert text.count('| safe') == 2 and '{{ style | safe }}' in text and '{{ script | safe }}' in text


def test_a_host_name_with_markup_is_escaped_in_the_page():
    fleet = sample_fleet()
    fleet[0]['host'] = '<b>evil</b>'
    page = mig_fleet_map(fleet)
    assert '<b>evil</b>' not in page and '&lt;b&gt;evil&lt;/b&gt;' in page


def test_every_host_and_gpu_has_stable_hooks():
    fleet = sample_fleet()
    page = mig_fleet_map(fleet)
    gpus = drawn(page)
    assert [h[0] for h in payload_of(page)['h']] == sorted(h['host'] for h in fleet)
    for record in fleet:
        for gpu in record['gpus']:
            entry = gpus[(record['host'], gpu['index'])]
            assert entry['uuid'] == gpu['uuid'] and entry['host_layout'] == record['layout']
            assert entry['dom_id'] == 'host-%s-gpu-%d' % (record['host'], gpu['index'])
    assert len(gpus) == sum(len(h['gpus']) for h in fleet)


def test_slices_tile_each_gpu_and_match_the_instances():
    fleet = sample_fleet()
    gpus = drawn(mig_fleet_map(fleet))
    checked = 0
    for record in fleet:
        for gpu in record['gpus']:
            if gpu['mig_mode']['current'] != 'enabled':
                continue
            entry = gpus[(record['host'], gpu['index'])]
            total = entry['total_slices']
            assert total == max(p['start'] + p['size'] for prof in gpu['profiles'] for p in prof['placements'])
            assert len(entry['states']) == total
            for position, instance in enumerate(entry['instances']):
                assert entry['states'][instance['start']:instance['start'] + instance['size']] == [position] * instance['size']
            assert sorted((i['start'], i['profile'], i['size'], i['id']) for i in entry['instances']) == sorted(
                (gi['placement']['start'], gi['profile'], gi['placement']['size'], gi['id']) for gi in gpu['gpu_instances'])
            free = [s for s in entry['states'] if not isinstance(s, int)]
            assert len(free) == gpu['free_slices']
            checked += 1
    assert checked == 7


def test_instances_carry_busy_pids_and_pods():
    gpus = drawn(mig_fleet_map(sample_fleet()))
    shared = gpus[('gpu-h100-01', 0)]['instances'][0]
    assert shared['busy'] and shared['pids'] == [1001, 1002]
    assert shared['pods'] == ['research/train-job-0 (container trainer)']
    idle = [i for i in gpus[('gpu-a100-01', 0)]['instances'] if i['start'] == 4][0]
    assert not idle['busy'] and idle['pods'] == [] and idle['compute_instances'] == ['1g.10gb']
    allocated = [i for i in gpus[('gpu-a100-01', 0)]['instances'] if i['start'] == 6][0]
    assert not allocated['busy'] and allocated['pods'] == ['ml-serving/llm-small-7f9c (container server)']


def test_gpu_figures_and_layout_states():
    gpus = drawn(mig_fleet_map(sample_fleet()))
    a100 = gpus[('gpu-a100-01', 0)]
    assert a100['in_layout'] is True and a100['figures']['free_slices'] == 2
    assert a100['figures']['stranded_slices'] == 1 and a100['figures']['fragmentation'] == 0.5
    assert a100['figures']['repacked_largest_placeable'] == '2g.20gb' and a100['states'][7] == 'stranded'
    daytime = gpus[('gpu-a100-01', 1)]   # 7x1g: slice 7 is free, but every compute slice is taken
    assert daytime['figures']['stranded_slices'] == 0 and daytime['figures']['fragmentation'] == 0.0
    assert daytime['states'][7] == 'unusable'
    h100 = gpus[('gpu-h100-01', 0)]
    assert h100['in_layout'] is False and h100['figures']['largest_placeable'] == '1g.20gb'
    a30 = gpus[('gpu-a30-01', 1)]
    assert a30['in_layout'] is None and a30['figures']['largest_placeable'] == '4g.24gb'
    assert a30['figures']['fragmentation'] == 0.0 and a30['model'] == 'A30'


def test_mig_disabled_and_gpus_without_mig_are_drawn_whole():
    gpus = drawn(mig_fleet_map(sample_fleet()))
    disabled = gpus[('gpu-a100-01', 2)]
    assert (disabled['mig'], disabled['pending'], disabled['total_slices']) == ('disabled', 'enabled', 0)
    assert disabled['figures'] is None and disabled['states'] == [] and disabled['processes'] == [77]
    no_mig = gpus[('inference-l40s-01', 0)]
    assert no_mig['mig'] == 'unsupported' and no_mig['processes'] == [900] and no_mig['pods'] == ['inference/vllm-0']
    assert disabled['pods'] == []


def test_allocations_as_nvidia_mig_facts_writes_them():
    """The facts name pods as 'namespace/pod' strings ('uid:...' when only a cgroup names them)."""
    gpus = drawn(mig_fleet_map(sample_fleet()))
    h200 = dict((i['start'], i) for i in gpus[('gpu-h200-01', 0)]['instances'])
    assert h200[4]['pods'] == ['batch/etl-17']
    facts = host_gpus([simulated_gpu('A30', [('4g.24gb', 0, [])])], allocations={(0, 0): ['uid:1f2e-77']})
    assert drawn(mig_fleet_map(one_host(facts)))[('node-1', 0)]['instances'][0]['pods'] == ['uid:1f2e-77']


def test_a_mig_disabled_gpu_with_empty_profiles_is_accepted():
    gpu = host_gpus([simulated_gpu('H100-SXM5-80GB', mig='disabled')])[0]
    assert gpu['profiles'] == []
    assert drawn(mig_fleet_map(one_host([gpu])))[('node-1', 0)]['mig'] == 'disabled'


# ---- totals -----------------------------------------------------------------------


def totals_of(document):
    return dict((node.attrs['data-total'], int(node.find_all('dd')[0].text())) for node in document.find_all(data_total=True))


def test_fleet_totals():
    fleet = sample_fleet()
    document = parse(mig_fleet_map(fleet)).root
    gpus = [gpu for record in fleet for gpu in record['gpus']]
    enabled = [g for g in gpus if g['mig_capable'] and g['mig_mode']['current'] == 'enabled']
    assert totals_of(document) == {
        'hosts': 5, 'gpus': 9, 'mig_enabled': 7, 'mig_disabled': 1, 'no_mig': 1,
        'gpu_instances': sum(len(g['gpu_instances']) for g in enabled),
        'busy_instances': 4, 'allocated_instances': 5,
        'free_slices': sum(g['free_slices'] for g in enabled),
        'stranded_slices': sum(g['stranded_slices'] for g in enabled),
        'in_layout': 4, 'out_of_layout': 2, 'layout_unknown': 3, 'failed_hosts': 0, 'attention': 5,
    }
    # slice 7 beside 3g+1g+1g on gpu-a100-01 GPU 0 and beside 1g at 6, 4, 5 on the H200; not beside 7x1g (GPU 1)
    assert totals_of(document)['stranded_slices'] == 2
    rows = dict((row.attrs['data-layout'], row.attrs) for row in document.find_all('tr', data_layout=True))
    assert sorted(rows) == ['', 'daytime', 'nighttime']
    assert (rows['daytime']['data-hosts'], rows['daytime']['data-gpus'], rows['daytime']['data-in-layout'],
            rows['daytime']['data-out-of-layout'], rows['daytime']['data-unknown']) == ('2', '5', '3', '2', '0')
    assert (rows['']['data-gpus'], rows['']['data-unknown']) == ('2', '2')
    assert 'none declared' in document.find_all('tr', data_layout='')[0].text()


def test_largest_placeable_counts_per_model():
    fleet = sample_fleet()
    document = parse(mig_fleet_map(fleet)).root
    counts = {}
    for row in document.find_all('tr', data_model=True):
        counts[row.attrs['data-model']] = [(li.attrs['data-profile'], int(li.attrs['data-count'])) for li in row.find_all('li')]
    expected = {}
    for record in fleet:
        for gpu in record['gpus']:
            if gpu['mig_capable'] and gpu['mig_mode']['current'] == 'enabled':
                model = expected.setdefault(gpu['name'].replace('NVIDIA ', ''), {})
                key = gpu['largest_placeable'] or 'none'
                model[key] = model.get(key, 0) + 1
    assert dict((model, dict(items)) for model, items in counts.items()) == expected
    # bigger profiles first, "nothing fits" last
    assert [name for name, count in counts['A30']][0] == '4g.24gb'
    assert counts['A100-SXM4-80GB'][-1] == ('none', 1)


# ---- slice states against the geometry -----------------------------------------------


def independent_unusable(gpu, placed):
    """Free slices of ``gpu`` (_host_model.Gpu) that no single valid extra instance could cover, with plain sets."""
    profiles = dict((p['name'], p) for p in gpu.profiles)
    total = max(p['start'] + p['size'] for prof in gpu.profiles for p in prof['placements'])
    used = set()
    counts = {}
    for name, start in placed:
        used |= set(range(start, start + profiles[name]['memory_slices']))
        counts[name] = counts.get(name, 0) + 1
    media_used = any(name.endswith('+me') for name, dummy in placed)
    usable = set()
    for name, profile in profiles.items():
        if counts.get(name, 0) >= profile['max_count'] or (name.endswith('+me') and media_used):
            continue
        for placement in profile['placements']:
            cover = set(range(placement['start'], placement['start'] + placement['size']))
            if not cover & used:
                usable |= cover
    return sorted(set(range(total)) - used - usable)


def independent_stranded(gpu, placed):
    """The stranded slices slice_states marks: the lowest unusable ones, as many as a rearrangement gives back."""
    return independent_unusable(gpu, placed)[:free_space_figures(gpu, placed)['stranded_slices']]


def layouts_of(model, sample, seed):
    placements = sorted(all_placements(model_gpu(model)))
    if len(placements) <= sample:
        return placements
    return random.Random(seed).sample(placements, sample)


@pytest.mark.parametrize('model', MODELS)
def test_slice_states_agree_with_analyze_and_an_independent_count(model):
    gpu = model_gpu(model)
    catalog = Catalog.from_data(gpu.profiles)
    for layout in layouts_of(model, 400, model):
        layout = list(layout)
        states = slice_states(catalog, layout)
        figures = analyze(catalog, Occupancy.of(catalog, layout))
        stranded = [index for index, state in enumerate(states) if state == 'stranded']
        assert len(stranded) == figures['stranded_slices'], layout
        assert stranded == independent_stranded(gpu, layout), layout
        unusable = [index for index, state in enumerate(states) if state == 'unusable']
        assert sorted(stranded + unusable) == independent_unusable(gpu, layout), layout
        assert states.count('free') + len(stranded) + len(unusable) == figures['free_slices']
        for position, (name, start) in enumerate(layout):
            size = catalog.get(name).memory_slices
            assert states[start:start + size] == [position] * size


@pytest.mark.parametrize('model', ['A100-SXM4-80GB', 'A30', 'H100-SXM5-80GB', 'H200'])
def test_the_map_marks_the_stranded_slices_of_placed_instances(model):
    layouts = [layout for layout in layouts_of(model, 60, 'map-' + model) if layout]
    gpus = []
    for index, layout in enumerate(layouts):
        state = with_instances(model_gpu(model), [(name, start, [900 + index] if index % 3 == 0 else [])
                                                  for name, start in layout])
        gpus.append(gpu_facts(replace(state, index=index, uuid='GPU-%s-%d' % (model, index))))
    drawing = drawn(mig_fleet_map(one_host(gpus)))
    saw_stranded = False
    for gpu, layout in zip(gpus, layouts):
        entry = drawing[('node-1', gpu['index'])]
        marked = [index for index, state in enumerate(entry['states']) if state == 'stranded']
        assert len(marked) == gpu['stranded_slices'] == entry['figures']['stranded_slices']
        assert marked == independent_stranded(model_gpu(model), list(layout))
        assert entry['figures']['largest_placeable'] == gpu['largest_placeable']
        assert entry['figures']['fragmentation'] == gpu['fragmentation']
        unusable = [index for index, state in enumerate(entry['states']) if state == 'unusable']
        assert sorted(marked + unusable) == independent_unusable(model_gpu(model), list(layout))
        saw_stranded = saw_stranded or bool(marked)
    if model != 'A30':   # 1g fits every A30 slice up to its max count: nothing is ever stranded there
        assert saw_stranded


def test_slice_states_reject_overlaps_and_bad_starts():
    catalog = Catalog.from_data(model_gpu('A100-SXM4-80GB').profiles)
    with pytest.raises(GeometryError, match='overlaps 3g.40gb at 4 on memory slice 4'):
        slice_states(catalog, [('3g.40gb', 4), ('1g.10gb', 4)])
    with pytest.raises(GeometryError, match='cannot start at memory slice 2'):
        slice_states(catalog, [('3g.40gb', 2)])
    with pytest.raises(GeometryError, match='not offered'):
        slice_states(catalog, [('9g.90gb', 0)])
    assert slice_states(catalog, []) == ['free'] * 8


# ---- escaping ---------------------------------------------------------------------


def test_every_value_is_escaped():
    nasty = '<script>alert("x")</script>&\'"'
    gpus = host_gpus([simulated_gpu('A100-SXM4-80GB', [('3g.40gb', 0, [])], uuid='GPU-"><img src=x>')],
                     allocations={(0, 0): [pod(nasty, nasty, nasty)]})
    gpus[0]['name'] = 'NVIDIA <b>A100</b>'
    page = mig_fleet_map([{'host': nasty, 'layout': nasty, 'gpus': gpus}], title=nasty, generated=nasty)
    # the template escapes every value; the JSON the script reads cannot close its element (tojson escapes < > & ')
    assert page.count('<script') == 2 and '<img' not in page and '<b>' not in page
    document = parse(page).root
    assert document.find_all('title')[0].text() == nasty and nasty in document.find_all('header')[0].text()
    row = document.find_all('tr', data_host=nasty)[0]   # in the attention list: out of layout
    assert row.attrs['data-model'] == '<b>A100</b>' and row.find_all('a')[0].text() == nasty
    entry = drawn(page)[(nasty, 0)]   # the script escapes what it draws (tests/browser)
    assert entry['uuid'] == 'GPU-"><img src=x>' and entry['model'] == '<b>A100</b>' and entry['host_layout'] == nasty
    assert entry['instances'][0]['pods'] == ['%s/%s (container %s)' % (nasty, nasty, nasty)]
    assert re.match(r'^host-[A-Za-z0-9_-]+$', entry['host_id'])


def test_host_ids_stay_unique_when_names_collapse():
    gpus = host_gpus([simulated_gpu('A30')])
    page = mig_fleet_map([{'host': 'a.b', 'layout': None, 'gpus': gpus},
                          {'host': 'a b', 'layout': None, 'gpus': copy.deepcopy(gpus)}])
    assert [h[2] for h in payload_of(page)['h']] == ['host-a-b', 'host-a-b-2']


def test_an_empty_fleet_renders():
    page = mig_fleet_map([])
    assert totals_of(parse(page).root)['gpus'] == 0 and payload_of(page)['h'] == []
    assert 'Nothing needs attention' in page


# ---- bad input --------------------------------------------------------------------


def good_host():
    return {'host': 'node-1', 'layout': 'daytime', 'gpus': host_gpus(
        [simulated_gpu('A100-SXM4-80GB', [('3g.40gb', 4, [])]), simulated_gpu('L40S', mig='disabled')])}


def breaking(change):
    host = good_host()
    change(host)
    return [host]


def set_in(path, value):
    def change(host):
        target = host
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def delete(path):
    def change(host):
        target = host
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return change


def add_instance(profile, start, size):
    def change(host):
        extra = copy.deepcopy(host['gpus'][0]['gpu_instances'][0])
        extra.update(id=99, profile=profile, placement={'start': start, 'size': size})
        host['gpus'][0]['gpu_instances'].append(extra)
    return change


GI = ('gpus', 0, 'gpu_instances', 0)


@pytest.mark.parametrize('hosts, reason', [
    ({'host': 'node-1'}, 'input must be a list of host records'),
    (['node-1'], 'host record 0 must be a dict'),
    (breaking(delete(('host',))), 'host record 0: host must be a non-empty inventory name'),
    (breaking(set_in(('layout',), 3)), 'host node-1: layout must be a layout name or null, got int 3'),
    (breaking(set_in(('gpus',), {})), 'host node-1: gpus must be a list'),
    (breaking(delete(('gpus', 0, 'uuid'))), 'host node-1 GPU 0: missing uuid'),
    (breaking(set_in(('gpus', 0, 'index'), True)), 'host node-1 GPU: index must be an integer, got True'),
    (breaking(set_in(('gpus', 1, 'index'), 0)), 'host node-1: GPU indexes repeat: [0, 0]'),
    (breaking(set_in(('gpus', 0, 'in_layout'), 'yes')), "host node-1 GPU 0: in_layout must be true, false or null"),
    (breaking(set_in(('gpus', 0, 'mig_mode'), {'current': 'on', 'pending': 'on'})),
     "host node-1 GPU 0: mig_mode.current must be enabled or disabled, got 'on'"),
    (breaking(set_in(('gpus', 0, 'profiles'), [])), 'host node-1 GPU 0: MIG is enabled but no GPU instance profiles'),
    (breaking(set_in(('gpus', 0, 'mig_mode'), {'current': 'disabled', 'pending': 'disabled'})),
     'host node-1 GPU 0: MIG is disabled but 1 GPU instance(s) are listed'),
    (breaking(set_in(GI + ('profile',), '2g.20gb')), 'host node-1 GPU 0 GPU instance %d: placement size 4 but 2g.20gb spans 2 memory slices'),
    (breaking(set_in(GI + ('profile',), '5g.50gb')), 'host node-1 GPU 0 GPU instance %d: profile 5g.50gb is not among the GPU profiles'),
    (breaking(set_in(GI + ('placement',), {'start': 2, 'size': 4})),
     'host node-1 GPU 0: 3g.40gb cannot start at memory slice 2 (placements start at 0, 4)'),
    (breaking(add_instance('1g.10gb', 5, 1)), 'host node-1 GPU 0: 1g.10gb at 5 overlaps 3g.40gb at 4 on memory slice 5'),
    (breaking(set_in(GI + ('allocated_to',), 'ml/pod')), 'host node-1 GPU 0 GPU instance %d: allocated_to must be a list'),
    (breaking(set_in(GI + ('allocated_to',), [{'namespace': 'ml'}])), 'host node-1 GPU 0 GPU instance %d allocated_to: missing pod (a string)'),
    (breaking(set_in(GI + ('allocated_to',), [7])),
     "host node-1 GPU 0 GPU instance %d: allocated_to entries must be {namespace, pod, container} or 'namespace/pod', got 7"),
    (breaking(set_in(('gpus', 1, 'allocated_to'), 'ml/pod')), 'host node-1 GPU 1: allocated_to must be a list of pods'),
    (breaking(set_in(GI + ('compute_instances', 0, 'processes'), [{'pid': 'x'}])),
     'host node-1 GPU 0 GPU instance %d: processes must be dicts with an integer pid'),
    (breaking(set_in(('gpus', 1, 'mig_capable'), 'no')), 'host node-1 GPU 1: mig_capable must be true or false'),
])
def test_bad_input_fails_with_the_reason(hosts, reason):
    if '%d' in reason:   # the simulator numbers GPU instances by placement slot: name the one it chose
        reason = reason % good_host()['gpus'][0]['gpu_instances'][0]['id']
    with pytest.raises(AnsibleFilterError) as exc:
        mig_fleet_map(hosts)
    assert str(exc.value).startswith('mig_fleet_map: ')
    assert reason in str(exc.value)


def test_duplicate_instance_ids_and_hosts_fail():
    hosts = breaking(add_instance('1g.10gb', 0, 1))
    first = hosts[0]['gpus'][0]['gpu_instances'][0]['id']
    hosts[0]['gpus'][0]['gpu_instances'][1]['id'] = first
    with pytest.raises(AnsibleFilterError, match=r'host node-1 GPU 0: GPU instance ids repeat: \[%d, %d\]' % (first, first)):
        mig_fleet_map(hosts)
    with pytest.raises(AnsibleFilterError, match='host names repeat: node-1'):
        mig_fleet_map([good_host(), good_host()])


def test_bad_title_fails():
    with pytest.raises(AnsibleFilterError, match='title must be a string'):
        mig_fleet_map([good_host()], title=['x'])
    with pytest.raises(AnsibleFilterError, match='generated must be a string'):
        mig_fleet_map([good_host()], generated=5)


# ---- the attention list -------------------------------------------------------------------------------------------


def attention_rows(page):
    document = parse(page).root
    return dict(((row.attrs['data-host'], row.attrs['data-gpu']), (row.attrs['data-model'], row.attrs['data-states']))
                for row in document.find_all('tr', data_states=True))


def test_attention_lists_what_needs_an_operator():
    rows = attention_rows(mig_fleet_map(sample_fleet()))
    assert rows == {
        # 1 stranded slice, fragmentation 0.50
        ('gpu-a100-01', '0'): ('A100-SXM4-80GB', 'fragmented'),
        # MIG disabled, enabled pending, pid 77 on it, and not the daytime layout
        ('gpu-a100-01', '2'): ('A100-SXM4-80GB', 'out-of-layout busy-switch-pending'),
        # nighttime declared, no entry matches the GPU (in_layout null)
        ('gpu-a30-01', '1'): ('A30', 'unmatched'),
        ('gpu-h100-01', '0'): ('H100 80GB HBM3', 'out-of-layout fragmented busy-switch-pending'),
        # a stranded slice although the largest still fits (fragmentation 0.00)
        ('gpu-h200-01', '0'): ('H200', 'fragmented'),
    }
    # 7x1g (daytime, in layout), a busy 7g in layout, an idle A30 in layout, and the L40S without a layout: nothing


def test_attention_thresholds_are_the_repack_defaults_and_can_be_changed():
    fleet = sample_fleet()
    relaxed = attention_rows(mig_fleet_map(fleet, fragmentation_above=0.5, stranded_above=1))
    assert ('gpu-a100-01', '0') not in relaxed and ('gpu-h200-01', '0') not in relaxed
    assert relaxed[('gpu-h100-01', '0')][1] == 'out-of-layout busy-switch-pending'
    strict = attention_rows(mig_fleet_map(fleet, fragmentation_above=0.0, stranded_above=0))
    assert strict[('gpu-h200-01', '0')][1] == 'fragmented'
    for bad in ({'fragmentation_above': -0.1}, {'stranded_above': 'x'}, {'stranded_above': True}):
        with pytest.raises(AnsibleFilterError, match='must be a number of 0 or more'):
            mig_fleet_map(fleet, **bad)


def test_a_busy_gpu_waiting_for_a_mode_change_needs_attention_even_in_layout():
    gpus = host_gpus([simulated_gpu('H100-SXM5-80GB', mig='disabled', pending='enabled', pids=[12]),
                      simulated_gpu('H100-SXM5-80GB', mig='disabled', pending='enabled')], in_layout={0: True, 1: True})
    rows = attention_rows(mig_fleet_map(one_host(gpus)))
    assert rows == {('node-1', '0'): ('H100 80GB HBM3', 'busy-switch-pending')}   # GPU 1 is idle: the switch just waits


def test_a_host_whose_facts_failed_is_listed_and_counted():
    fleet = sample_fleet() + [{'host': 'gpu-lost-01', 'layout': None, 'failed': 'unreachable: ssh timed out'}]
    page = mig_fleet_map(fleet)
    rows = attention_rows(page)
    assert rows[('gpu-lost-01', '')] == ('', 'failed')
    assert 'facts not read: unreachable: ssh timed out' in page
    totals = totals_of(parse(page).root)
    assert totals['failed_hosts'] == 1 and totals['hosts'] == 6 and totals['attention'] == 6
    assert [h for h in payload_of(page)['h'] if h[0] == 'gpu-lost-01'][0][3] == 'unreachable: ssh timed out'
    with pytest.raises(AnsibleFilterError, match='host gpu-lost-01: failed must be a reason'):
        mig_fleet_map([{'host': 'gpu-lost-01', 'layout': None, 'failed': 1}])


# ---- the planned view -----------------------------------------------------------------------------------------------


def nighttime_plan(fleet):
    """What nvidia_mig_layout (apply=false, evict=true) says of gpu-a100-01 for the nighttime layout (2x3g.40gb)."""
    gpus = dict((g['index'], g) for g in fleet[0]['gpus'])
    held = [gi for gi in gpus[1]['gpu_instances'] if gi['placement']['start'] == 0][0]
    return {'layout': 'nighttime', 'gpus': [
        {'index': 1, 'in_layout': False, 'mode': {'after': {'current': 'enabled', 'pending': 'enabled'}},
         'before': [], 'after': [{'id': None, 'profile': '3g.40gb', 'placement': {'start': 0, 'size': 4}},
                                 {'id': None, 'profile': '3g.40gb', 'placement': {'start': 4, 'size': 4}}],
         'destroyed_instances': [{'id': gi['id'], 'profile': gi['profile'], 'placement': gi['placement'],
                                  'allocated_to': ['team-a/notebook-1'] if gi is held else []}
                                 for gi in gpus[1]['gpu_instances']],
         'pods_to_evict': ['team-a/notebook-1']},
        {'index': 2, 'in_layout': False, 'mode': {'after': {'current': 'enabled', 'pending': 'enabled'}},
         'after': None, 'destroyed_instances': [], 'pods_to_evict': [], 'deferred': True,
         'note': 'instances planned after MIG is enabled (NVML describes the profiles only then)'},
    ]}


def test_the_planned_view_marks_what_goes_and_names_the_pods_that_move():
    fleet = sample_fleet()
    fleet[0]['plan'] = nighttime_plan(fleet)
    page = mig_fleet_map(fleet)
    gpus = drawn(page)
    seven = gpus[('gpu-a100-01', 1)]
    assert seven['planned_layout'] == 'nighttime'
    assert seven['plan']['after'] == [('3g.40gb', 0, 4, False), ('3g.40gb', 4, 4, False)]
    assert seven['plan']['destroyed'] == sorted(i['id'] for i in seven['instances'])
    assert seven['plan']['pods_to_evict'] == ['team-a/notebook-1'] and not seven['plan']['in_layout']
    deferred = gpus[('gpu-a100-01', 2)]['plan']
    assert deferred['after'] is None and 'after MIG is enabled' in deferred['note'] and deferred['mig_after'] == 'enabled'
    assert gpus[('gpu-a100-01', 0)]['plan'] is None   # the plan leaves GPU 0 alone
    assert gpus[('gpu-h100-01', 0)]['plan'] is None and gpus[('gpu-h100-01', 0)]['planned_layout'] is None
    # a planned switch of a busy GPU needs attention
    assert 'busy-switch-pending' in attention_rows(page)[('gpu-a100-01', '2')][1]


@pytest.mark.parametrize('change, reason', [
    (lambda plan: plan.update(gpus={}), 'host gpu-a100-01 plan: gpus must be a list'),
    (lambda plan: plan.pop('layout'), 'host gpu-a100-01 plan: missing layout'),
    (lambda plan: plan['gpus'][0].update(index=7), 'host gpu-a100-01 plan GPU 7: no such GPU in the facts'),
    (lambda plan: plan['gpus'][0].update(pods_to_evict=[1]), 'pods_to_evict must be a list of strings'),
    (lambda plan: plan['gpus'][0].update(destroyed_instances=[{'profile': '1g.10gb'}]), 'destroyed_instances entries must be dicts with an integer id'),
    (lambda plan: plan['gpus'][0]['after'][0].pop('placement'), 'host gpu-a100-01 plan GPU 1 after: missing placement'),
])
def test_a_malformed_plan_fails_with_the_reason(change, reason):
    fleet = sample_fleet()
    plan = nighttime_plan(fleet)
    change(plan)
    fleet[0]['plan'] = plan
    with pytest.raises(AnsibleFilterError) as exc:
        mig_fleet_map(fleet)
    assert reason in str(exc.value)
