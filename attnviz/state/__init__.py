"""The app's plain data: sessions, view-models, figures, exports, jobs. No Qt, no torch."""
