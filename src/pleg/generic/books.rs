//! What the relister keeps between reads beside the pod records — each book until a
//! read settles it: the stream's final statuses, the exit statuses the runtime may
//! amend, the sandboxes said deleted, what NRI said ahead of the status, the pods found gone lately, and the pods whose
//! read failed. The books followed one status at a time ([`Book`]) are read again
//! through [`Books::reread`].

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::cri::RuntimeService;
use crate::pleg::amended_exits::AmendedExits;
use crate::pleg::deleted_sandboxes::DeletedSandboxes;
use crate::pleg::early_words::EarlyWords;
use crate::pleg::final_statuses::FinalStatusBook;
use crate::pleg::schedule::{Book, RecentlyGone, Reread, StatusBook};

/// What the relister keeps between reads beside the records, each until a read settles it.
#[derive(Default)]
pub(super) struct Books {
    /// Stopped containers' final statuses from the stream (shared with the inbox, which
    /// enters them as they are heard).
    pub(super) final_statuses: FinalStatusBook,
    /// Containers read with an exit status the runtime lost.
    pub(super) amended_exits: AmendedExits,
    /// Sandboxes the runtime said deleted.
    pub(super) deleted_sandboxes: DeletedSandboxes,
    /// What the runtime said through NRI ahead of its status.
    pub(super) early_words: EarlyWords,
    /// Pods a read found gone lately.
    pub(super) gone: RecentlyGone,
    /// Pods whose last read failed while the stream was down: the next full relist reads
    /// them (the kubelet's `podsToReinspect`). While the stream is up a failed read is
    /// retried at the relist period instead, from the schedule.
    pub(super) failed: std::collections::BTreeSet<String>,
}

impl Books {
    /// The pod of `book`'s entry `id` and its re-read from `runtime`, while one is to
    /// come.
    pub(super) fn reread<R: RuntimeService>(
        &self,
        book: StatusBook,
        id: &str,
        runtime: R,
        timeout: Duration,
    ) -> Option<(String, BoxFuture<'static, Reread>)> {
        fn of<B: Book, R: RuntimeService>(
            b: &B,
            id: &str,
            runtime: R,
            timeout: Duration,
        ) -> Option<(String, BoxFuture<'static, Reread>)> {
            Some((b.pod_of(id)?.to_owned(), b.reread(id, runtime, timeout)?))
        }
        match book {
            StatusBook::AmendedExits => of(&self.amended_exits, id, runtime, timeout),
            StatusBook::DeletedSandboxes => of(&self.deleted_sandboxes, id, runtime, timeout),
            StatusBook::EarlyWords => of(&self.early_words, id, runtime, timeout),
        }
    }

    /// The book `book` names.
    pub(super) fn book_mut(&mut self, book: StatusBook) -> &mut dyn Book {
        match book {
            StatusBook::AmendedExits => &mut self.amended_exits,
            StatusBook::DeletedSandboxes => &mut self.deleted_sandboxes,
            StatusBook::EarlyWords => &mut self.early_words,
        }
    }
}
