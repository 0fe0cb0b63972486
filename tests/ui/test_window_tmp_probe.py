from typing import Any
def test_probe(qtbot: Any, make_window: Any) -> None:
    window, _ = make_window(context={"n_threads": 0, "n_threads_batch": 0}, wait_model=False)
    qtbot.wait(4000)
    print("READY", window.model_ready(), window.model and window.model.settings.n_threads)
    print("MSG", window.statusBar().currentMessage())
    from PySide6.QtWidgets import QLabel
    for l in window.findChildren(QLabel):
        if l.isVisible() and l.text(): print("L", l.objectName(), l.text()[:200])
