import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Crash evidence: what a launch that died leaves for the next one to tell which operation, if
// any, killed it.
//
//   attempts/<id>.attempt   an attempt of <id> started in this launch and has not ended: a hard
//                           link to the record (the first attempt, nothing on file: the common
//                           case costs one link), or the text `<attempts> <crashes> <kills> <alone>`
//                           (`alone` 1: it is the operation running alone, nothing else in flight)
//   attempts/<id>.suspect   left by a launch that died: `<attempts> <crashes> <alone> <kills>` —
//                           the attempts that started and never ended, the crashes attributed to
//                           <id>, whether its next attempt must run alone (1: before other work,
//                           2: once no other work is due), and the kills attributed to it
//   attempts/launch         `witness on` or `witness off`, then `crashed <signal>` appended by
//                           the crash-signal witness if the launch crashed, then `evaluated`
//                           once the next launch has turned the markers into suspects
//   attempts/lifecycle      `inactive` while the app said it was not active (absent: active)
//
// At open, `beginLaunch` reads the markers the last launch left: the attempts that were in
// flight when it died. It was a crash if the witness saw a crash signal; a kill (SIGKILL, as
// the OS kills apps) if the witness was on and saw none; either, if there was no witness.
//
// - A death that may have been a crash, with exactly one attempt in flight, is that operation's
//   crash; with several in flight, each of them must next run alone, before other work, so
//   that a crash singles one out.
// - A kill while the app was not active (iOS kills suspended and background apps routinely;
//   the user's swipe-away comes after the app resigned active), or a death without a witness
//   while it was not active, counts against nobody and changes nothing.
// - A kill while the app was active, with one attempt in flight that ran alone, is that
//   operation's kill: as iOS kills an app that exhausts memory or hangs. With any other attempts
//   in flight, each of them must next run alone — after the other due work, so that a kill from
//   outside at a random moment rarely finds one alone — and kills count only in a row: any other
//   kill while active (one that found something else in flight) clears every kill on file.
//
// The markers become suspect files (each written whole, by rename), the launch file is marked
// `evaluated` (a second open after a crash between these steps does not count the same death
// twice), the markers and the lifecycle file are removed, and a new launch file starts. None of
// these files is synced: they have to survive a process crash, which the page cache does; a
// power cut merely forgets some evidence.

/// What a launch that died left about one record whose attempts never ended.
package struct CrashSuspect: Sendable, Equatable {
    /// Attempts that started and never ended, over consecutive launches that died.
    package var interruptedAttempts: Int
    /// Launches that crashed while an attempt of this record was the only one in flight.
    package var crashes: Int
    /// Whether its next attempt must run alone (it was in flight at a crash or a kill while
    /// the app was active beside others, or crashes or kills were attributed to it).
    package var runsAlone: Bool
    /// Launches killed in a row, while the app was active, during its attempt running alone.
    package var kills: Int
    /// Whether it runs alone only once no other work is due (a suspect of kills), rather than
    /// before other work (a suspect of crashes).
    package var runsAloneAfterOthers: Bool

    package init(interruptedAttempts: Int, crashes: Int, runsAlone: Bool, kills: Int = 0, runsAloneAfterOthers: Bool = false) {
        self.interruptedAttempts = interruptedAttempts
        self.crashes = crashes
        self.runsAlone = runsAlone
        self.kills = kills
        self.runsAloneAfterOthers = runsAlone && runsAloneAfterOthers
    }
}

/// What an attempt marker says: the attempts of a record started and not ended, the crashes
/// and kills carried over, and whether the attempt runs alone.
package struct AttemptMarker: Sendable, Equatable {
    package var attempts: Int
    package var crashes: Int
    package var kills: Int
    /// The attempt is the operation running alone: nothing else is in flight until it ends.
    package var runsAlone: Bool

    package init(attempts: Int, crashes: Int = 0, kills: Int = 0, runsAlone: Bool = false) {
        self.attempts = attempts
        self.crashes = crashes
        self.kills = kills
        self.runsAlone = runsAlone
    }
}

/// How the launch before this one ended, as far as its attempts in flight are concerned.
package enum PreviousLaunchEnding: Sendable, Equatable {
    /// No attempt was in flight when it ended (or nothing is known of it).
    case noAttemptsInFlight
    /// It died with attempts in flight and the witness saw this crash signal.
    case crashed(signal: Int32)
    /// It died with attempts in flight and the witness saw no crash signal: it was killed.
    case killed
    /// It died with attempts in flight and had no witness: a crash or a kill.
    case unwitnessed
}

extension RecordStore {
    static let suspectExtension = "suspect"
    static let launchFileName = "launch"
    static let lifecycleFileName = "lifecycle"
    static let inactiveLine = "inactive"

    /// Turns the attempt markers the last launch left into suspects (see the file comment) and
    /// starts this launch's launch file. With `witness`, returns a descriptor of that file open
    /// for appending, for ``CrashSignalWitness``; the caller closes it. `wasActive`: whether the
    /// app was active when the last launch ended, as it said (``PersistentOperationQueue/ApplicationState``).
    ///
    /// - Throws: ``PersistenceError`` only when the store is closed; a file that cannot be
    ///   written (a full disk) leaves the evidence as it is, for `restore()` to read cautiously.
    package func beginLaunch(witness: Bool) throws -> (ending: PreviousLaunchEnding, wasActive: Bool, descriptor: Int32?) {
        let change = try beginChange()
        defer { change.end() }
        let launchPath = layout.path(ofEntry: Self.launchFileName, in: .attempts)
        let lifecyclePath = layout.path(ofEntry: Self.lifecycleFileName, in: .attempts)
        let lines = launchFileLines(at: launchPath)
        let wasActive = launchFileLines(at: lifecyclePath)?.last != Self.inactiveLine
        let markers = attemptMarkers()
        var ending = PreviousLaunchEnding.noAttemptsInFlight
        if !markers.isEmpty {
            if let signal = lines?.compactMap({ $0.hasPrefix("crashed ") ? Int32($0.dropFirst(8)) : nil }).first {
                ending = .crashed(signal: signal)
            } else if lines?.contains("witness on") == true {
                ending = .killed
            } else {
                ending = .unwitnessed
            }
        }
        do {
            if !markers.isEmpty, lines?.contains("evaluated") != true {
                try evaluate(markers, ending: ending, wasActive: wasActive, launchFileExists: lines != nil)
                let evaluated = (lines ?? []) + ["evaluated"]
                try writeLaunchFile(evaluated, at: launchPath)
            }
            for id in markers.keys {
                try? configuration.fileSystem.unlink(attemptMarkerPath(id))
            }
            journal?.clearAttemptMarkers(markers.keys)
            try? configuration.fileSystem.unlink(lifecyclePath)
            try writeLaunchFile([witness ? "witness on" : "witness off"], at: launchPath)
        } catch {
            // A full disk, say: the store still opens. Without a launch file the next launch
            // runs the attempts this one had in flight alone, counting no crash (it reads as
            // a power cut), and `restore()` reads the markers left here as suspects that run
            // alone: cautious, and nothing is lost.
            try? configuration.fileSystem.unlink(launchPath)
            return (ending, wasActive, nil)
        }
        guard witness else { return (ending, wasActive, nil) }
        let descriptor = try? configuration.fileSystem.open(launchPath, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
        return (ending, wasActive, descriptor)
    }

    /// Writes the suspect files the last launch's `markers` make, given how it ended.
    /// `launchFileExists`: `false` when the launch file is gone — a power cut lost it (it is
    /// not synced), and a power cut is not a crash: no crash is counted then.
    private func evaluate(_ markers: [String: AttemptMarker], ending: PreviousLaunchEnding, wasActive: Bool, launchFileExists: Bool) throws {
        // Without a witness, a death while the app was not active is taken for a kill: iOS
        // kills suspended apps routinely, and a crash cannot be told from that.
        let mayBeCrash = ending != .killed && (wasActive || ending != .unwitnessed)
        let isKillWhileActive = wasActive && ending == .killed
        let killedOneAlone = isKillWhileActive && markers.count == 1 && markers.first?.value.runsAlone == true
        if isKillWhileActive && !killedOneAlone {
            // Something else kills the app too: kills count only in a row.
            for (id, suspect) in suspects() where suspect.kills > 0 && markers[id] == nil {
                var cleared = suspect
                cleared.kills = 0
                try writeSuspect(cleared, forRecord: id)
            }
        }
        for (id, marker) in markers {
            var suspect = CrashSuspect(
                interruptedAttempts: marker.attempts, crashes: marker.crashes,
                runsAlone: marker.crashes > 0 || marker.kills > 0 || marker.runsAlone, kills: marker.kills,
                runsAloneAfterOthers: marker.crashes == 0
            )
            if mayBeCrash {
                if markers.count == 1, launchFileExists { suspect.crashes += 1 }
                suspect.runsAlone = true
                suspect.runsAloneAfterOthers = false
            } else if isKillWhileActive {
                suspect.kills = killedOneAlone ? marker.kills + 1 : 0
                suspect.runsAlone = true
                suspect.runsAloneAfterOthers = suspect.crashes == 0
            }
            try writeSuspect(suspect, forRecord: id)
        }
    }

    /// Notes in the launch file that this launch has no witness after all (see
    /// ``CrashSignalWitness/register(_:)``), so that its death counts as a possible crash.
    package func noteNoWitness() {
        guard let change = try? beginChange() else { return }
        defer { change.end() }
        try? writeLaunchFile(["witness off"], at: layout.path(ofEntry: Self.launchFileName, in: .attempts))
    }

    /// The suspects earlier launches left, by record identifier. Unreadable or malformed
    /// suspect files read as one interrupted attempt that runs alone.
    package func suspects() -> [String: CrashSuspect] {
        var suspects: [String: CrashSuspect] = [:]
        for (id, path) in attemptEntries(withExtension: Self.suspectExtension) {
            var suspect = CrashSuspect(interruptedAttempts: 1, crashes: 0, runsAlone: true)
            if case .contents(let data)? = try? file.read(path, maximumSize: 64) {
                let fields = String(decoding: data, as: UTF8.self).split(separator: " ").compactMap { Int($0) }
                // Three fields: written before kills were counted.
                if fields.count == 3 || fields.count == 4, fields.allSatisfy({ $0 >= 0 }) {
                    suspect = CrashSuspect(
                        interruptedAttempts: fields[0], crashes: fields[1], runsAlone: fields[2] != 0,
                        kills: fields.count == 4 ? fields[3] : 0, runsAloneAfterOthers: fields[2] == 2
                    )
                }
            }
            suspects[id] = suspect
        }
        return suspects
    }

    /// What the attempt markers and suspect files say of each record that has one: the
    /// attempts started and not ended (an attempt running in this launch, or interrupted by an
    /// earlier one), the crashes on file, and whether its next attempt runs alone. A marker
    /// supersedes its record's suspect file (the attempt started after it was written).
    package func attemptEvidence() -> [String: CrashSuspect] {
        var evidence = suspects()
        for (id, marker) in attemptMarkers() {
            evidence[id] = CrashSuspect(interruptedAttempts: marker.attempts, crashes: marker.crashes, runsAlone: false, kills: marker.kills)
        }
        return evidence
    }

    /// Removes the suspect file of record `id`, if any (best effort, like a marker).
    package func clearSuspect(forRecord id: String) {
        guard let change = try? beginChange() else { return }
        defer { change.end() }
        try? configuration.fileSystem.unlink(suspectPath(id))
    }

    /// The attempt markers: attempts started, crashes and kills carried, and whether the
    /// attempt runs alone, by record identifier. Markers without a count (links to the record,
    /// empty or unreadable files) count as one attempt and nothing else; a lone number or two
    /// (an earlier version's marker) as that many attempts and crashes.
    func attemptMarkers() -> [String: AttemptMarker] {
        var markers = fileAttemptMarkers()
        if let journal = try? readableJournal()?.journal {
            markers.merge(journal.attemptMarkers()) { _, journal in journal }
        }
        return markers
    }

    /// The markers kept as files (the earlier layout's, or an earlier version's).
    private func fileAttemptMarkers() -> [String: AttemptMarker] {
        var markers: [String: AttemptMarker] = [:]
        for (id, path) in attemptEntries(withExtension: Self.attemptMarkerExtension) {
            var marker = AttemptMarker(attempts: 1)
            if case .contents(let data)? = try? file.read(path, maximumSize: 48) {
                let fields = String(decoding: data, as: UTF8.self).split(separator: " ").compactMap { Int($0) }
                if let attempts = fields.first, attempts > 0 { marker.attempts = attempts }
                if fields.count > 1, fields[1] > 0 { marker.crashes = fields[1] }
                if fields.count > 2, fields[2] > 0 { marker.kills = fields[2] }
                if fields.count > 3 { marker.runsAlone = fields[3] == 1 }
            }
            markers[id] = marker
        }
        return markers
    }

    /// Notes whether the app is active (see ``PersistentOperationQueue/ApplicationState``), for
    /// the next launch to tell a kill while active (evidence against an operation running alone)
    /// from one while not (evidence against nobody). Best effort, not synced, like the markers.
    package func noteApplicationState(isActive: Bool) {
        guard let change = try? beginChange() else { return }
        defer { change.end() }
        let path = layout.path(ofEntry: Self.lifecycleFileName, in: .attempts)
        if isActive {
            try? configuration.fileSystem.unlink(path)
        } else {
            try? file.replaceContents(of: path, with: Data((Self.inactiveLine + "\n").utf8), synchronizes: false)
        }
    }

    private func attemptEntries(withExtension fileExtension: String) -> [(id: String, path: String)] {
        let suffix = "." + fileExtension
        let names = (try? configuration.fileSystem.contentsOfDirectory(layout.path(of: .attempts))) ?? []
        return names.compactMap { name in
            guard name.hasSuffix(suffix) else { return nil }
            let id = String(name.dropLast(suffix.count))
            guard OperationRecord.isValidIdentifier(id) else { return nil }
            return (id, layout.path(ofEntry: name, in: .attempts))
        }
    }

    private func writeSuspect(_ suspect: CrashSuspect, forRecord id: String) throws {
        let alone = suspect.runsAlone ? (suspect.runsAloneAfterOthers ? 2 : 1) : 0
        let text = "\(suspect.interruptedAttempts) \(suspect.crashes) \(alone) \(suspect.kills)"
        let path = suspectPath(id)
        do {
            try file.replaceContents(of: path, with: Data(text.utf8), synchronizes: false)
        } catch {
            throw writeFailed("Could not record an operation in flight when the last launch ended.", path: path, error: error)
        }
    }

    private func launchFileLines(at path: String) -> [String]? {
        guard case .contents(let data)? = try? file.read(path, maximumSize: 4096) else { return nil }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    private func writeLaunchFile(_ lines: [String], at path: String) throws {
        do {
            try file.replaceContents(of: path, with: Data(lines.map { $0 + "\n" }.joined().utf8), synchronizes: false)
        } catch {
            throw writeFailed("Could not write the launch file of crash-loop protection.", path: path, error: error)
        }
    }

    func suspectPath(_ id: String) -> String {
        layout.path(ofEntry: id + "." + Self.suspectExtension, in: .attempts)
    }
}
