"""The `*.test.yaml` schema is strict: unknown keys, missing `allowed`, contradictions are errors with file:line."""

import textwrap

import pytest

from webhook.testing.runner import load_test_file

POD = "{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ml}}"


def write(tmp_path, body: str):
    path = tmp_path / "x.test.yaml"
    path.write_text(textwrap.dedent(body))
    return path


BAD = [
    # (name, file body, want line, want text)
    ("unknown expectation key", f"""\
        cases:
          - name: a
            request: {POD}
            expect:
              allowed: true
              alowed: false
        """, 6, "expect.alowed: Extra inputs are not permitted (did you mean `allowed`?)"),
    ("allowed is required", f"""\
        cases:
          - name: a
            request: {POD}
            expect:
              denied_by: [rule x]
        """, 4, "expect.allowed: Field required"),
    ("a string is not a bool", f"""\
        cases:
          - name: a
            request: {POD}
            expect: {{allowed: "false"}}
        """, 4, "expect.allowed: Input should be a valid boolean"),
    ("allowed with denying blocks", f"""\
        cases:
          - name: a
            request: {POD}
            expect: {{allowed: true, denied_by: [rule x]}}
        """, 4, "contradicts"),
    ("bad regex", f"""\
        cases:
          - name: a
            request: {POD}
            expect: {{allowed: false, messages: ["(unclosed"]}}
        """, 4, "bad regex"),
    ("full review with wrapper keys", """\
        cases:
          - name: a
            user: bob
            request: {kind: AdmissionReview, apiVersion: admission.k8s.io/v1, request: {uid: "1"}}
            expect: {allowed: true}
        """, 2, "move user into it"),
    ("manifest without kind", """\
        cases:
          - name: a
            request: {metadata: {name: p}}
            expect: {allowed: true}
        """, 2, "needs a `kind`"),
    ("patch on the validating endpoint", f"""\
        cases:
          - name: a
            mutate: false
            request: {POD}
            expect: {{allowed: true, patch: []}}
        """, 2, "mutate: false never produces a patch"),
    ("duplicate names", f"""\
        cases:
          - name: a
            request: {POD}
            expect: {{allowed: true}}
          - name: a
            request: {POD}
            expect: {{allowed: true}}
        """, 5, "cases[1].name: two cases are named 'a'; the first is cases[0] at line 2"),
    ("misspelt key in a before request", f"""\
        cases:
          - name: a
            before:
              - reqest: {POD}
            request: {POD}
            expect: {{allowed: true}}
        """, 4, "cases[0].before[0].reqest: Extra inputs are not permitted (did you mean `request`?)"),
    ("misspelt key in a cluster edit", f"""\
        cases:
          - name: a
            before:
              - add: [{POD}]
                remov: []
            request: {POD}
            expect: {{allowed: true}}
        """, 5, "cases[0].before[0].remov: Extra inputs are not permitted (did you mean `remove`?)"),
    ("misspelt key in a removal", f"""\
        cases:
          - name: a
            before:
              - remove: [{{kind: Pod, nam: p}}]
            request: {POD}
            expect: {{allowed: true}}
        """, 4, "cases[0].before[0].remove[0].nam: Extra inputs are not permitted (did you mean `name`?)"),
    ("misspelt alias", f"""\
        cases:
          - name: a
            dryrun: true
            request: {POD}
            expect: {{allowed: true}}
        """, 3, "cases[0].dryrun: Extra inputs are not permitted (did you mean `dryRun`?)"),
    ("a key like no other gets no guess", f"""\
        cases:
          - name: a
            zzzz: 1
            request: {POD}
            expect: {{allowed: true}}
        """, 3, "cases[0].zzzz: Extra inputs are not permitted"),
    ("an empty cluster edit", f"""\
        cases:
          - name: a
            before:
              - {{add: [], remove: []}}
            request: {POD}
            expect: {{allowed: true}}
        """, 4, "needs `add` or `remove`"),
    ("persist on a CONNECT", f"""\
        cases:
          - name: a
            before:
              - {{persist: true, operation: CONNECT, request: {POD}}}
            request: {POD}
            expect: {{allowed: true}}
        """, 4, "a CONNECT stores nothing"),
    ("persist on a dry run", f"""\
        cases:
          - name: a
            before:
              - {{persist: true, dryRun: true, request: {POD}}}
            request: {POD}
            expect: {{allowed: true}}
        """, 4, "stores nothing for a dry run"),
    ("persist on a dry-run review", f"""\
        cases:
          - name: a
            before:
              - persist: true
                request: {{kind: AdmissionReview, apiVersion: admission.k8s.io/v1, request: {{uid: "1", dryRun: true}}}}
            request: {POD}
            expect: {{allowed: true}}
        """, 4, "stores nothing for a dry run"),
    ("no cases", "cases: []\n", 1, "at least 1 item"),
    ("unknown top-level key", "clusters: x.yaml\ncases: []\n", 1, "clusters: Extra inputs are not permitted (did you mean `cluster`?)"),
    ("not a mapping", "- a\n- b\n", 1, "a mapping with `cases:`"),
    ("invalid yaml", "cases:\n  - name: [\n", 3, "invalid YAML"),
    ("bad operation", f"""\
        cases:
          - name: a
            operation: PATCH
            request: {POD}
            expect: {{allowed: true}}
        """, 3, "operation: Input should be"),
]


@pytest.mark.parametrize("name,body,want_line,want_text", BAD, ids=[b[0] for b in BAD])
def test_bad_test_files_name_the_line(tmp_path, name, body, want_line, want_text):
    path = write(tmp_path, body)
    with pytest.raises(ValueError) as err:
        load_test_file(path)
    first = next(line for line in str(err.value).splitlines() if want_text in line)
    assert f"x.test.yaml:{want_line}:" in first
    if name == "a key like no other gets no guess":
        assert "did you mean" not in first


def test_good_file_keeps_defaults_and_aliases(tmp_path):
    path = write(tmp_path, f"""\
        cluster: c.yaml
        now: 1700000000
        cases:
          - name: a
            dryRun: true
            groups: [g]
            request: {POD}
            expect: {{allowed: false, placement: null}}
        """)
    tf = load_test_file(path)
    case = tf.cases[0]
    assert (tf.cluster, tf.now, case.dry_run, case.groups, case.mutate) == ("c.yaml", 1700000000, True, ["g"], True)
    assert case.expect.expects_placement() and case.expect.placement is None
