import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The space reserve. A removal is a frame to append, so on a full disk a store could not
// record that work completed, and nothing would ever leave it. A read-write store keeps
// `journal/reserve`, 32 KiB of real (not sparse) bytes; a removal or a move to the failed
// area that fails for lack of space deletes it and is written in the room it leaves (about
// 500 removals). Adds and rewrites never use it: they fail with the disk full. The reserve is
// made again, best effort, when the store opens and after a compaction. Until it is, the
// store is short of space and writes no crash evidence (attempt frames), which would take
// the room removals need.

extension JournalStore {
    /// The size of the space reserve: 32 KiB.
    static let reserveSize = 32 << 10
    static let reserveFileName = "reserve"

    var reservePath: String { journalPath + "/" + Self.reserveFileName }

    /// Whether the space reserve file is there (for tests).
    package var hasSpaceReserve: Bool {
        (try? configuration.fileSystem.linkStatus(reservePath)) != nil
    }

    /// Makes the space reserve when it is missing; gives up quietly when there is no room.
    /// Called without the store's lock.
    func ensureReserve() {
        let fileSystem = configuration.fileSystem
        guard !configuration.isReadOnly else { return }
        guard (try? fileSystem.linkStatus(reservePath)) == nil else {
            state.withLock { $0.isShortOfSpace = false }
            return
        }
        let temporary = reservePath + ".tmp"
        do {
            try Self.writeFile(Data(count: Self.reserveSize), to: temporary, configuration: configuration)
            try fileSystem.rename(temporary, reservePath)
            state.withLock { $0.isShortOfSpace = false }
        } catch {
            try? fileSystem.unlink(temporary)
            state.withLock { $0.isShortOfSpace = true }
        }
    }

    /// Deletes the space reserve to make room; returns whether there was one. Called with
    /// the store's lock held (`state`: its state).
    func releaseReserve(_ state: inout State) -> Bool {
        state.isShortOfSpace = true
        return (try? configuration.fileSystem.unlink(reservePath)) != nil
    }
}

extension JournalFrame.Kind {
    /// Whether the frame records that work ended (and may use the space reserve).
    var endsWork: Bool { self == .remove || self == .retire || self == .moveToFailed }
}
