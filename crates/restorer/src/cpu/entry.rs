//! What can keep the image kernel from being entered, on any CPU.

/// Why the way into the image kernel could not be set up.
pub(crate) enum NotEntered {
    /// No safe page for it.
    Place(restorer::safepages::PlaceError),
    /// The image's entry does not suit this CPU.
    Entry(alloc::string::String),
}

impl From<restorer::safepages::PlaceError> for NotEntered {
    fn from(e: restorer::safepages::PlaceError) -> Self {
        NotEntered::Place(e)
    }
}
