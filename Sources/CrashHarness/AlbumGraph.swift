/// The demo's operation graphs, by index: album `a` is "create album" ← photos 1…3 ←
/// "publish", each node an upload whose index encodes its album and role, so that journal
/// lines stay plain integers and every reader names them alike.
///
///     album 2 create   1000020
///     album 2 photo 1  1000021   (depends on create)
///     album 2 publish  1000029   (depends on every photo)
package enum AlbumGraph {
    /// Indices from here on are graph nodes; lower ones are the demo's independent uploads.
    package static let firstIndex = 1_000_000
    /// How many photos each album holds.
    package static let photosPerAlbum = 3

    /// What a node does in its album.
    package enum Role: Hashable, Sendable {
        case create
        case photo(Int)
        case publish

        var offset: Int {
            switch self {
            case .create: return 0
            case .photo(let number): return number
            case .publish: return 9
            }
        }
    }

    /// The roles of one album, prerequisites first.
    package static var roles: [Role] {
        [.create] + (1...photosPerAlbum).map(Role.photo) + [.publish]
    }

    /// The index of `role` in album `album`.
    package static func index(album: Int, role: Role) -> Int {
        firstIndex + album * 10 + role.offset
    }

    /// The album and role of a graph node's index; `nil` for an independent upload.
    package static func node(of index: Int) -> (album: Int, role: Role)? {
        guard index >= firstIndex else { return nil }
        let offset = (index - firstIndex) % 10
        let album = (index - firstIndex) / 10
        switch offset {
        case 0: return (album, .create)
        case 1...photosPerAlbum: return (album, .photo(offset))
        case 9: return (album, .publish)
        default: return nil
        }
    }

    /// The prerequisites of `role` within its album, as indices.
    package static func prerequisites(album: Int, role: Role) -> [Int] {
        switch role {
        case .create: return []
        case .photo: return [index(album: album, role: .create)]
        case .publish: return (1...photosPerAlbum).map { index(album: album, role: .photo($0)) }
        }
    }

    /// Whether album `album` is added with one `addOperations` call (a batch) rather than one
    /// `addOperation` per node: the even albums.
    package static func isAddedAsBatch(album: Int) -> Bool {
        album % 2 == 0
    }

    /// Whether `role` of album `album` is refused (fails for good): photo 2 of every third
    /// album, so that its "publish" fails with it.
    package static func isRefused(album: Int, role: Role) -> Bool {
        role == .photo(2) && album % 3 == 2
    }

    /// Whether node `index` can succeed: it is not refused, and neither is any node it waits
    /// for (a prerequisite that fails for good fails its dependents).
    package static func canSucceed(_ index: Int) -> Bool {
        guard let (album, role) = node(of: index) else { return true }
        return !isRefused(album: album, role: role) && prerequisites(album: album, role: role).allSatisfy(canSucceed)
    }

    /// "upload 7", "album 2 create", "album 2 photo 1", "album 2 publish".
    package static func name(of index: Int) -> String {
        guard let (album, role) = node(of: index) else { return "upload \(index)" }
        return "album \(album) \(roleName(role))"
    }

    /// "create", "photo 1", "publish".
    package static func roleName(_ role: Role) -> String {
        switch role {
        case .create: return "create"
        case .photo(let number): return "photo \(number)"
        case .publish: return "publish"
        }
    }
}
