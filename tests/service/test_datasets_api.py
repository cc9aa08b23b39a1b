"""POST/GET/DELETE /v1/datasets on both backends: streamed, checked, stored once per content and owner."""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
from sqlalchemy import func, select

from ntklab.store import api_keys
from ntklab.store.models import Blob, BlobChunk, Dataset

PROBLEM = "application/problem+json"
OCTET = {"Content-Type": "application/octet-stream"}


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """A version 1.0 .npy header declaring `shape`, padded as numpy pads it."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (-(10 + len(text) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def arrays(n: int = 12, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(n, 2))


def upload(client, body: bytes, headers=None, **params):
    return client.post("/v1/datasets", content=body, headers=headers or OCTET, params=params)


def upload_pair(client, x: bytes, y: bytes, headers=None, **params):
    files = {"x": ("x.npy", x, "application/octet-stream"), "y": ("y.npy", y, "application/octet-stream")}
    return client.post("/v1/datasets", files=files, headers=headers, params=params)


def stored_rows(client) -> tuple[int, int, int]:
    with client.app.state.sessions() as session:
        return tuple(session.scalar(select(func.count()).select_from(table)) for table in (Dataset, Blob, BlobChunk))


def assert_refused(answer, status: int, field: str, *words: str) -> dict:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == PROBLEM
    problem = answer.json()
    assert field in [error["field"] for error in problem["errors"]], problem
    for word in words:
        assert word in problem["detail"], problem
    return problem


def job_on(dataset_id: str, **data) -> dict:
    return {
        "model": {"hidden": [8]},
        "data": {"kind": "dataset", "id": dataset_id, **data},
        "training": {"max_steps": 5},
    }


# --------------------------------------------------------------------------- upload, dedup, read back


def test_an_npz_upload_is_stored_and_described(client):
    x, y = arrays()
    answer = upload(client, npz(x=x, y=y), name="gauss")
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["id"].startswith("ds_") and body["object"] == "dataset" and body["name"] == "gauss"
    assert body["points"] == 12
    assert body["x"]["shape"] == [12, 3] and body["x"]["dtype"] == "float64" and len(body["x"]["sha256"]) == 64
    assert body["y"]["shape"] == [12, 2] and body["size"] == len(npy(x)) + len(npy(y))
    assert answer.headers["Location"].endswith(f"/v1/datasets/{body['id']}")
    assert client.get(f"/v1/datasets/{body['id']}").json() == body
    assert stored_rows(client) == (1, 2, 2)


def test_the_same_arrays_are_stored_once_per_owner_whatever_the_container(client):
    """.npz bytes differ between saves (zip timestamps); the arrays' .npy bytes do not."""
    x, y = arrays()
    first = upload(client, npz(x=x, y=y))
    again = upload(client, npz(x=x, y=y))
    as_pair = upload_pair(client, npy(x), npy(y))
    assert first.status_code == 201 and again.status_code == 200 and as_pair.status_code == 200, as_pair.text
    assert first.json()["id"] == again.json()["id"] == as_pair.json()["id"]
    other_y = upload_pair(client, npy(x), npy(y + 1))
    assert other_y.status_code == 201 and other_y.json()["id"] != first.json()["id"]
    assert stored_rows(client) == (2, 3, 3), "x is one blob shared by both data sets"


def test_a_large_blob_is_stored_in_chunks_and_read_back_exactly(client):
    from ntklab.store import uploads_repo

    x = np.arange(300_000, dtype=np.float64).reshape(100_000, 3)
    y = np.ones(100_000, dtype=np.float32)
    answer = upload_pair(client, npy(x), npy(y))
    assert answer.status_code == 201, answer.text
    with client.app.state.sessions() as session:
        row = session.scalar(select(Dataset).where(Dataset.id == answer.json()["id"]))
        chunks = session.scalar(select(Blob.chunks).where(Blob.id == row.x_blob_id))
        data = uploads_repo.read_blob(session, row.x_blob_id)
    assert chunks == 3 and data == npy(x)
    assert answer.json()["y"] == {"shape": [100_000], "dtype": "float32", "sha256": answer.json()["y"]["sha256"]}


def test_integer_x_is_allowed_for_embedding_inputs(client):
    tokens = np.random.default_rng(0).integers(0, 50, size=(10, 6))
    answer = upload(client, npz(x=tokens, y=np.zeros(10)))
    assert answer.status_code == 201, answer.text
    assert answer.json()["x"]["dtype"] == "int64"


def test_list_pages_newest_first_and_delete_frees_the_blobs(client):
    ids = [upload(client, npz(x=arrays(seed=seed)[0], y=arrays(seed=seed)[1])).json()["id"] for seed in range(3)]
    first = client.get("/v1/datasets", params={"limit": 2}).json()
    assert [item["id"] for item in first["data"]] == ids[::-1][:2] and first["has_more"]
    rest = client.get("/v1/datasets", params={"limit": 2, "after": first["next"]}).json()
    assert [item["id"] for item in rest["data"]] == ids[:1] and not rest["has_more"] and rest["next"] is None
    assert client.get("/v1/datasets", params={"after": "bogus"}).status_code == 400
    for dataset_id in ids:
        assert client.delete(f"/v1/datasets/{dataset_id}").status_code == 204
    assert client.get(f"/v1/datasets/{ids[0]}").status_code == 404
    assert client.delete(f"/v1/datasets/{ids[0]}").status_code == 404
    assert stored_rows(client) == (0, 0, 0)


def test_uploads_bypass_the_json_body_cap_but_not_their_own(client_with):
    x, y = arrays(n=200, d=10)
    body = npz(x=x, y=y)
    small_json = client_with(max_body_bytes=1000, max_upload_bytes=10 * len(body))
    assert upload(small_json, body).status_code == 201
    assert (
        small_json.post(
            "/v1/jobs", content=b"{" + b" " * 2000 + b"}", headers={"Content-Type": "application/json"}
        ).status_code
        == 413
    )
    small_upload = client_with(max_upload_bytes=len(body) // 2)
    before = stored_rows(small_upload)
    problem = assert_refused(upload(small_upload, npz(x=x + 1, y=y)), 413, "body", "max_upload_bytes")
    assert problem["errors"][0]["limit"] == len(body) // 2
    assert stored_rows(small_upload) == before


def test_a_body_streamed_without_content_length_is_cut_at_the_cap(client_with):
    x, y = arrays(n=200, d=10)
    body = npz(x=x, y=y)
    small = client_with(max_upload_bytes=len(body) // 2)

    def chunks():
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    assert_refused(small.post("/v1/datasets", content=chunks(), headers=OCTET), 413, "body", "sent at least")
    assert stored_rows(small) == (0, 0, 0)


# --------------------------------------------------------------------------- malicious and malformed uploads


def test_nan_in_a_data_set_is_refused_naming_the_array_and_index(client):
    x, y = arrays()
    x[4, 1] = np.nan
    problem = assert_refused(upload(client, npz(x=x, y=y)), 422, "x", "non-finite", "[4, 1]")
    assert problem["type"] == "urn:ntklab:problem:invalid-upload"
    y[0, 0] = np.inf
    assert_refused(upload_pair(client, npy(np.ones((12, 3))), npy(y)), 422, "y", "non-finite")
    assert stored_rows(client) == (0, 0, 0)


def test_a_header_declaring_a_billion_rows_is_refused_before_any_data_is_read(client):
    x = npy_header((10**9, 4)) + np.zeros(16).tobytes()
    problem = assert_refused(
        upload_pair(client, x, npy(np.zeros(4))), 422, "x", "1000000000 points", "max_train_points"
    )
    assert problem["type"] == "urn:ntklab:problem:resource-cap"
    assert problem["errors"][0]["value"] == 10**9
    as_npz = io.BytesIO()
    with zipfile.ZipFile(as_npz, "w") as archive:
        archive.writestr("x.npy", x)
        archive.writestr("y.npy", npy(np.zeros(4)))
    assert_refused(upload(client, as_npz.getvalue()), 422, "x", "1000000000 points")
    assert stored_rows(client) == (0, 0, 0)


def test_a_header_declaring_more_bytes_than_the_cap_is_413(client_with):
    small = client_with(max_upload_bytes=1_000_000, max_train_points=10**6)
    x = npy_header((500_000, 100)) + np.zeros(8).tobytes()
    assert_refused(upload_pair(small, x, npy(np.zeros(5))), 413, "body", "declares an array (x)")


def test_pickles_objects_and_odd_dtypes_are_refused(client):
    objects = io.BytesIO()
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    assert_refused(upload_pair(client, objects.getvalue(), npy(np.zeros(2))), 422, "x", "not allowed")
    import pickle

    assert_refused(upload_pair(client, pickle.dumps(np.ones((2, 2))), npy(np.zeros(2))), 422, "x", "not a .npy")
    for bad in (
        np.ones((3, 2), dtype=bool),
        np.ones((3, 2), dtype=np.complex128),
        np.ones((3, 2), dtype=np.uint64),
        np.array([["a", "b"]] * 3),
    ):
        assert_refused(upload_pair(client, npy(bad), npy(np.zeros(3))), 422, "x", "not allowed")
    structured = np.zeros(3, dtype=[("a", "<f8"), ("b", "<f8")])
    assert_refused(upload_pair(client, npy(np.zeros((3, 1))), npy(structured)), 422, "y", "not allowed")
    assert stored_rows(client) == (0, 0, 0)


def test_shapes_truncation_and_archives_are_checked(client):
    x, y = arrays()
    cases = [
        (upload_pair(client, npy(x[:, 0]), npy(y)), "x", "at least 2 dimensions"),
        (upload_pair(client, npy(x), npy(y[:5])), "y", "has 5 rows but x has 12"),
        (upload_pair(client, npy(x), npy(np.ones((12, 2, 2)))), "y", "[points] or [points, O]"),
        (upload_pair(client, npy(np.ones((0, 3))), npy(np.ones(0))), "x", "empty dimension"),
        (upload_pair(client, npy(x)[:-8], npy(y)), "x", "truncated"),
        (upload_pair(client, npy(x) + b"\x00", npy(y)), "x", "extra bytes"),
        (upload(client, b"PK\x03\x04 not really a zip"), "file", "not an .npz"),
        (upload(client, npz(x=x, y=y, z=y)), "file", "exactly x.npy and y.npy"),
        (upload(client, npz(x=x)), "y", "no array 'y'"),
        (
            upload_pair(client, npy(x), npy(y))
            if False
            else client.post("/v1/datasets", files={"x": ("x.npy", npy(x))}),
            "y",
            "missing",
        ),
        (client.post("/v1/datasets", files={"w": ("w.npy", npy(x))}), "w", "unexpected file part"),
        (upload(client, b""), "file", "empty"),
    ]
    for answer, field, words in cases:
        assert_refused(answer, answer.status_code if answer.status_code in (413, 422) else 422, field, words)
    assert stored_rows(client) == (0, 0, 0)


def test_a_zip_member_that_unpacks_past_its_header_is_refused(client):
    x, y = arrays()
    padded = io.BytesIO()
    with zipfile.ZipFile(padded, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", npy(x) + b"\x00" * 1_000_000)
        archive.writestr("y.npy", npy(y))
    assert_refused(upload(client, padded.getvalue()), 422, "x", "extra bytes")
    assert stored_rows(client) == (0, 0, 0)


# --------------------------------------------------------------------------- jobs on a data set


def test_a_job_on_a_data_set_gets_its_stored_shapes(client):
    x, y = arrays(n=20, d=3)
    dataset_id = upload(client, npz(x=x, y=y)).json()["id"]
    answer = client.post("/v1/jobs", json=job_on(dataset_id, probe={"n": 4}))
    assert answer.status_code == 202, answer.text
    spec = answer.json()["spec"]
    assert spec["data"]["n_train"] == 20
    assert spec["data"]["stored"] == {
        "points": 20,
        "x_shape": [3],
        "x_integer": False,
        "y_width": 2,
        "x_min": None,
        "x_max": None,
        "y_integer": False,
        "y_min": None,
        "y_max": None,
    }
    assert spec["model"]["output_dim"] == 2
    assert answer.json()["parameters"] == 3 * 8 + 8 + 8 * 2 + 2
    spoofed = job_on(dataset_id, n_train=5)
    spoofed["data"]["stored"] = {"points": 10**6, "x_shape": [1], "x_integer": True, "y_width": 2}
    assert client.post("/v1/jobs", json=spoofed).json()["spec"]["data"]["stored"]["points"] == 20, "stored is replaced"


def test_n_train_beyond_the_stored_points_is_422_naming_both(client):
    dataset_id = upload(client, npz(x=arrays()[0], y=arrays()[1])).json()["id"]
    problem = assert_refused(
        client.post("/v1/jobs", json=job_on(dataset_id, n_train=13)), 422, "data.n_train", "12 points"
    )
    assert problem["errors"][0]["limit"] == 12 and problem["errors"][0]["value"] == 13
    assert_refused(client.post("/v1/jobs", json=job_on("ds_" + "0" * 32)), 422, "data.id", "no data set")
    bad = client.post("/v1/jobs", json=job_on("not-an-id"))
    assert bad.status_code == 422 and "data.id" in [error["field"] for error in bad.json()["errors"]]
    wrong_width = job_on(dataset_id)
    wrong_width["model"]["output_dim"] = 3
    assert_refused(client.post("/v1/jobs", json=wrong_width), 422, "model", "width 2")


def test_integer_x_is_cast_to_float_for_an_mlp_so_standardize_applies(client):
    pixels = np.random.default_rng(0).integers(0, 255, size=(10, 6)).astype(np.uint8)
    dataset_id = upload(client, npz(x=pixels, y=np.zeros(10))).json()["id"]
    answer = client.post("/v1/jobs", json=job_on(dataset_id, standardize=True))
    assert answer.status_code == 202, answer.text
    assert answer.json()["spec"]["data"]["stored"]["x_integer"] is True


def test_a_sweep_over_a_data_set_resolves_every_point(client):
    dataset_id = upload(client, npz(x=arrays()[0], y=arrays()[1])).json()["id"]
    sweep = {"base": job_on(dataset_id), "grid": {"data.n_train": [4, 12]}}
    answer = client.post("/v1/sweeps", json=sweep)
    assert answer.status_code == 202, answer.text
    too_many = client.post("/v1/sweeps", json={"base": job_on(dataset_id), "grid": {"data.n_train": [4, 13]}})
    assert_refused(too_many, 422, "data.n_train", "12 points")


def test_deleting_a_data_set_that_a_queued_job_uses_is_409(client):
    dataset_id = upload(client, npz(x=arrays()[0], y=arrays()[1])).json()["id"]
    job = client.post("/v1/jobs", json=job_on(dataset_id)).json()
    problem = assert_refused_409(client.delete(f"/v1/datasets/{dataset_id}"))
    assert job["id"] in problem["detail"]
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 202
    assert client.delete(f"/v1/datasets/{dataset_id}").status_code == 204


def assert_refused_409(answer) -> dict:
    assert answer.status_code == 409, answer.text
    assert answer.json()["type"] == "urn:ntklab:problem:invalid-state"
    return answer.json()


# --------------------------------------------------------------------------- owners


def test_owners_see_use_and_delete_only_their_own_data_sets(client_with):
    secured = client_with(auth="on", auth_cache_s=0)
    with secured.app.state.sessions() as session:
        alice = {"X-API-Key": api_keys.create_key(session, "alice").secret}
        bob = {"X-API-Key": api_keys.create_key(session, "bob").secret}
        admin = {"X-API-Key": api_keys.create_key(session, "root", is_admin=True).secret}
    x, y = arrays()
    assert upload(secured, npz(x=x, y=y)).status_code == 401, "no key, no upload"
    mine = upload(secured, npz(x=x, y=y), headers={**OCTET, **alice}).json()["id"]
    theirs = upload(secured, npz(x=x, y=y), headers={**OCTET, **bob})
    assert theirs.status_code == 201 and theirs.json()["id"] != mine, "the same bytes are stored once per owner"
    assert secured.get(f"/v1/datasets/{mine}", headers=bob).status_code == 404
    assert [item["id"] for item in secured.get("/v1/datasets", headers=bob).json()["data"]] == [theirs.json()["id"]]
    assert_refused(secured.post("/v1/jobs", json=job_on(mine), headers=bob), 422, "data.id", "no data set")
    assert secured.delete(f"/v1/datasets/{mine}", headers=bob).status_code == 404
    assert secured.get(f"/v1/datasets/{mine}", headers=admin).status_code == 200, "the admin key reads every owner's"
    assert len(secured.get("/v1/datasets", headers=admin).json()["data"]) == 2
    assert secured.delete(f"/v1/datasets/{mine}", headers=alice).status_code == 204
    assert stored_rows(secured) == (1, 2, 2), "bob's copy is untouched"
