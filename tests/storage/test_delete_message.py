"""Deleting one message keeps what is below it: its replies move up to its parent (real
SQLite; the search index follows)."""

from __future__ import annotations

from app.storage import Database, Tab


def test_one_message_goes_and_its_replies_stay(db: Database) -> None:
    c = db.create_conversation()
    u1 = db.add_message(c.id, "user", "first")
    a1 = db.add_message(c.id, "assistant", "one", parent_id=u1.id)
    u2 = db.add_message(c.id, "user", "secret zebra", parent_id=a1.id)
    a2 = db.add_message(c.id, "assistant", "two", parent_id=u2.id)
    u3 = db.add_message(c.id, "user", "third", parent_id=a2.id)
    db.set_current_leaf(c.id, u3.id)
    db.save_tabs([Tab(c.id, 0, u2.id)], c.id)
    assert db.search("zebra")
    db.delete_message(u2.id)
    assert [m.id for m in db.get_thread(c.id)] == [u1.id, a1.id, a2.id, u3.id]
    assert db.get_message(a2.id).parent_id == a1.id
    assert db.load_tabs() == ([Tab(c.id, 0, u3.id)], c.id)  # the tab shows the branch below
    assert not db.search("zebra")
    # a first message: its reply becomes the first
    db.delete_message(u1.id)
    assert db.get_message(a1.id).parent_id is None
    assert [m.content for m in db.get_thread(c.id)] == ["one", "two", "third"]
    # the last message: the thread ends at its parent
    db.delete_message(u3.id)
    assert [m.content for m in db.get_thread(c.id)] == ["one", "two"]
    assert db.get_conversation(c.id).current_leaf_id == a2.id
