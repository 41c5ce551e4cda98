import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Crash-loop protection needs to know, at the next launch, how many attempts of a record
// started and never ended. An attempt marker `attempts/<id>.attempt` holds that count as
// decimal text; an empty marker means one. Markers are renamed into place but not synced: they only have to survive a
// process crash (the case crash-loop protection is about), and losing one to a power cut
// merely forgets how many crashes an operation caused. The record itself is never rewritten
// at an attempt's start, so a marker can never damage it.

extension RecordStore {
    static let attemptMarkerExtension = "attempt"

    /// Records that `count` attempts of record `id` have started without ending.
    package func setAttemptsInFlight(_ count: Int, forRecord id: String) throws {
        try checkWritable()
        let path = attemptMarkerPath(id)
        if count <= 0 {
            clearAttemptsInFlight(forRecord: id)
            return
        }
        do {
            if count == 1 {
                // The common case, an operation's first attempt: an empty marker means one,
                // and creating it in place (open, close) costs a third of a replacement. A
                // crash mid-way leaves an empty file, which reads as one too.
                let descriptor = try configuration.fileSystem.open(
                    path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions
                )
                try configuration.fileSystem.close(descriptor)
            } else {
                try file.replaceContents(of: path, with: Data(String(count).utf8), synchronizes: false)
            }
        } catch {
            try checkAreaExists(.attempts)
            throw writeFailed("Could not write the attempt marker.", path: path, error: error)
        }
    }

    /// Removes the attempt marker of record `id`, if any (best effort: a leftover marker only
    /// makes crash-loop protection more cautious).
    package func clearAttemptsInFlight(forRecord id: String) {
        try? configuration.fileSystem.unlink(attemptMarkerPath(id))
    }

    /// The attempts in flight of every record that has a marker. Empty and unreadable markers
    /// count as one attempt; stray entries are ignored.
    package func attemptsInFlight() -> [String: Int] {
        let suffix = "." + Self.attemptMarkerExtension
        let names = (try? configuration.fileSystem.contentsOfDirectory(layout.path(of: .attempts))) ?? []
        var counts: [String: Int] = [:]
        for name in names where name.hasSuffix(suffix) {
            let id = String(name.dropLast(suffix.count))
            guard OperationRecord.isValidIdentifier(id) else { continue }
            var count = 1
            if case .contents(let data)? = try? file.read(layout.path(ofEntry: name, in: .attempts), maximumSize: 32),
               let value = Int(String(decoding: data, as: UTF8.self)), value > 0 {
                count = value
            }
            counts[id] = count
        }
        return counts
    }

    private func attemptMarkerPath(_ id: String) -> String {
        layout.path(ofEntry: id + "." + Self.attemptMarkerExtension, in: .attempts)
    }
}
